"""Commands run where the server runs: ``migrate``, ``serve``, ``prune-idempotency`` and
``verify`` (which opens the database directly, or with ``--server`` asks a running server over
HTTP). The server's modules
(the database layer, the services, uvicorn) are imported by the commands that use them, so that
the client's commands start without loading them."""

from __future__ import annotations

import json
import os
import socket
import tempfile
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn

from app.cli.common import (
    DEFAULT_URL,
    JSON_OUT,
    KEY,
    URL,
    connect,
    console,
    err_console,
    fail,
    finite,
)
from app.cli.database import DATABASE_URL, opened, redact, settings
from app.config import get_settings
from app.principal import SYSTEM, Principal


def migrate(
    database_url: DATABASE_URL = None,
    downgrade: Annotated[
        str | None,
        typer.Option(
            help="Downgrade to this Alembic revision instead (e.g. 0001, base): drops data.",
            show_default=False,
        ),
    ] = None,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help=(
                "With --downgrade: go ahead even though the database holds ledger entries, "
                "datasets or reservations."
            ),
        ),
    ] = False,
) -> None:
    """Bring the database schema to the latest Alembic revision (or --downgrade it)."""
    from alembic.util import CommandError

    from app.db import migrate as m
    from app.db.engine import Database
    from app.services.verification import rederive_if_formulas_changed

    url = database_url or settings().database_url
    with opened(url, "migrate"):
        if downgrade is None:
            m.upgrade(url)
            typer.echo(f"schema at head: {redact(url)}")
            db = Database(url)
            try:
                report = rederive_if_formulas_changed(db)
            finally:
                db.dispose()
            rebuilt = [
                d.name
                for d in (report.datasets if report is not None else [])
                if (d.model_extra or {}).get("rebuilt")
            ]
            if rebuilt:  # curves stored under formulas since corrected (audited)
                typer.echo(f"stored curves re-derived and totals rebuilt: {', '.join(rebuilt)}")
            return
        try:
            m.downgrade(url, downgrade, force=force)
        except CommandError as exc:
            fail(str(exc))
    typer.echo(f"schema at {downgrade}: {redact(url)}")


def serve(
    host: Annotated[str, typer.Option(help="Network interface (IP address) to bind.")] = (
        "127.0.0.1"
    ),
    port: Annotated[int, typer.Option(min=1, max=65535, help="TCP port number (1-65535).")] = 8000,
    workers: Annotated[
        int,
        typer.Option(
            envvar="WEB_CONCURRENCY",
            min=1,
            help="Worker processes (default: WEB_CONCURRENCY, else 1; use 1 with SQLite).",
        ),
    ] = 1,
    database_url: DATABASE_URL = None,
) -> None:
    """Serve the HTTP API with uvicorn (uvloop + httptools)."""
    import uvicorn

    if database_url:
        os.environ["PRIVACY_LEDGER_DATABASE_URL"] = database_url
        get_settings.cache_clear()
    config = settings()
    if config.database_url.startswith("sqlite") and workers > 1:
        typer.echo(
            "note: SQLite writes are serialised in one process; extra workers do not help", err=True
        )
    if workers > 1 and not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        # prometheus-client's multiprocess mode: /metrics sums every worker's counters
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="privacy-ledger-metrics-")
    busy = _port_taken(host, port)
    if busy is not None:  # before start-up, which would create (and print) a first admin key
        fail(
            f"cannot listen on {host}:{port}: {busy}. Choose another port with --port "
            "(`make run PORT=8001`) and point the CLI and client at it (PRIVACY_LEDGER_URL)."
        )
    typer.echo(f"privacy-ledger on http://{host}:{port} (database: {redact(config.database_url)})")
    uvicorn.run(
        "app.main:app",
        host=host,
        port=port,
        workers=workers,
        loop="uvloop",
        http="httptools",
        log_level=config.log_level.lower(),
        log_config=None,  # the app sends uvicorn's loggers through its JSON formatter
        access_log=False,  # the app writes one access line per request, with its request id
    )


def _port_taken(host: str, port: int) -> str | None:
    """Why ``host:port`` cannot be bound now (as uvicorn binds it), or None when it can. A
    server that failed to bind after start-up had already created and printed the first admin
    key, and the next start on a free port printed none."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        return str(exc)
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            return exc.strerror or str(exc)
    return None


def verify(
    rebuild: Annotated[
        bool,
        typer.Option("--rebuild", help="Rewrite totals that drifted from the ledger (audited)."),
    ] = False,
    on_server: Annotated[
        bool,
        typer.Option(
            "--server",
            help="Ask the running server (POST /v1/admin/verify, admin key) instead of opening "
            "the database here.",
        ),
    ] = False,
    database_url: DATABASE_URL = None,
    url: URL = DEFAULT_URL,
    api_key: KEY = None,
    as_json: JSON_OUT = False,
) -> None:
    """Recompute every dataset's totals from its ledger and report any drift (exit 1 on drift
    unless --rebuild rewrote it)."""
    if on_server:
        report = _verify_on_server(url, api_key, rebuild, quiet=as_json)
    else:
        target = database_url or settings().database_url
        with opened(target, "verify", hint=", and run `privacy-ledger migrate`", existing=True):
            report = _verify_here(target, rebuild, as_json)
    if as_json:
        typer.echo(json.dumps(report, indent=2))
    else:
        for d in report["datasets"]:
            state = (
                "ok"
                if d["ok"]
                else "DRIFT "
                + ",".join(d["drift"] or ["curves"])
                + (" (rebuilt)" if d.get("rebuilt") else "")
            )
            noun = "entry " if d["entries"] == 1 else "entries"
            console.print(f"{d['name']:<32} {d['entries']:>10} {noun}  {state}", markup=False)
        console.print("all totals match the ledger" if report["ok"] else "drift found")
    if not report["ok"] and not rebuild:
        raise typer.Exit(code=1)


def _verify_here(database_url: str, rebuild: bool, quiet: bool) -> dict[str, Any]:
    """One dataset at a time (each in its own locked transaction), with a progress bar."""
    from app.db.engine import Database
    from app.services import datasets as dataset_service
    from app.services.verification import verify as run_verify

    db = Database(database_url)
    try:
        listed: list[tuple[str, str, int]] = []
        while True:
            page = dataset_service.list_datasets(  # archived ones too: their totals count
                db, SYSTEM, limit=1000, offset=len(listed), archived="all"
            )
            listed += [(d.id, d.name, d.entries) for d in page.datasets]
            if not page.datasets or len(listed) >= page.total:
                break
        datasets: list[dict[str, Any]] = []
        columns = (
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("ledger entries"),
        )
        # verify's own units: two per ledger entry (the curve check, then the sum). A dataset's
        # stored entry count stands in until its verify counts its ledger (stale totals are
        # what --rebuild is for), so the bar moves as each dataset's ledger is read.
        guesses = [2 * n for _, _, n in listed]
        finished = 0
        with Progress(*columns, console=err_console, transient=True, disable=quiet) as bar:
            task = bar.add_task("verifying" + (" and rebuilding" if rebuild else ""), total=None)
            bar.update(task, total=sum(guesses) // 2)
            for i, (dataset_id, name, _) in enumerate(listed):
                bar.update(task, description=f"verifying {name}")
                later = sum(guesses[i + 1 :])

                def moved(done: int, total: int, base: int = finished, later: int = later) -> None:
                    bar.update(
                        task, completed=(base + done) // 2, total=(base + total + later) // 2
                    )

                scoped = Principal(
                    key_id=SYSTEM.key_id, role=SYSTEM.role, dataset_ids=(dataset_id,)
                )
                report = run_verify(db, scoped, rebuild=rebuild, progress=moved)
                datasets += report.model_dump(mode="json")["datasets"]
                finished += 2 * sum(d.entries for d in report.datasets)
                bar.update(task, completed=finished // 2, total=(finished + later) // 2)
    finally:
        db.dispose()
    return {"ok": all(d["ok"] for d in datasets), "datasets": datasets}


def _verify_on_server(url: str, api_key: str | None, rebuild: bool, quiet: bool) -> dict[str, Any]:
    """The server verifies every dataset in one request: a spinner while it works."""
    with connect(url, api_key, timeout=VERIFY_TIMEOUT) as session:
        what = "the server is verifying" + (" and rebuilding" if rebuild else "") + " totals"
        with Progress(
            SpinnerColumn(), TextColumn(what), console=err_console, transient=True, disable=quiet
        ) as bar:
            bar.add_task(what, total=None)
            report: dict[str, Any] = session.call(
                lambda c: c.request(
                    "POST", "/v1/admin/verify", params={"rebuild": "true" if rebuild else "false"}
                )
            )
    return report


def prune_idempotency(
    older_than_days: Annotated[
        float,
        typer.Option(
            "--older-than-days",
            parser=finite,
            metavar="NUMBER",
            help="Delete the Idempotency-Key answers made more than this many days ago (> 0).",
            show_default=False,
        ),
    ],
    database_url: DATABASE_URL = None,
    as_json: JSON_OUT = False,
) -> None:
    """Delete old Idempotency-Key answers (a retry of such a key is then a new request, charged
    again); the server can do it hourly instead (PRIVACY_LEDGER_IDEMPOTENCY_RETENTION_DAYS)."""
    import math
    from datetime import timedelta

    from app.db.engine import Database
    from app.db.models import utcnow
    from app.services import idempotency

    if not (math.isfinite(older_than_days) and older_than_days > 0):
        fail(f"--older-than-days must be a number of days above 0, got {older_than_days:g}")
    try:
        made_before = utcnow() - timedelta(days=older_than_days)
    except OverflowError:
        fail(f"--older-than-days {older_than_days:g} reaches before the calendar's start")
    target = database_url or settings().database_url
    with opened(
        target, "prune-idempotency", hint=", and run `privacy-ledger migrate`", existing=True
    ):
        db = Database(target)
        try:
            deleted = idempotency.prune(db, made_before)
        finally:
            db.dispose()
    if as_json:
        typer.echo(json.dumps({"deleted": deleted, "made_before": made_before.isoformat()}))
    else:
        noun = "answer" if deleted == 1 else "answers"
        console.print(
            f"deleted {deleted} Idempotency-Key {noun} made before {made_before.isoformat()}",
            markup=False,
        )


VERIFY_TIMEOUT = 3600.0
"""Seconds to wait for the server's verify answer (it reads every ledger once)."""


__all__ = ["migrate", "prune_idempotency", "redact", "serve", "verify"]
