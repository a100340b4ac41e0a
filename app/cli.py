"""The ``privacy-ledger`` command (also ``python -m app.cli``).

Server-side commands (talk to the database directly): ``serve``, ``migrate``, ``verify``, and
``keys create --local``. Client commands talk to a running server over HTTP, found through
``--url`` / ``--api-key`` or ``PRIVACY_LEDGER_URL`` / ``PRIVACY_LEDGER_API_KEY``: ``datasets``,
``status``, ``charge``, ``compose``, ``keys``. Every client command takes ``--json`` for scripts.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from alembic.util import CommandError
from rich.console import Console
from rich.table import Table

from app import client as http_client
from app.config import get_settings
from app.db import migrate as m
from app.db.engine import Database
from app.errors import ProblemError
from app.principal import SYSTEM, Role
from app.services import keys as key_service
from app.services.ledger import verify as run_verify

cli = typer.Typer(
    name="privacy-ledger",
    help="A stateful privacy-budget accountant: serve it, migrate it, and talk to it.",
    no_args_is_help=True,
    add_completion=False,
)


@cli.command()
def migrate(
    database_url: Annotated[
        str | None, typer.Option(help="Database URL (default: PRIVACY_LEDGER_DATABASE_URL)")
    ] = None,
    downgrade: Annotated[
        str | None,
        typer.Option(help="Downgrade to this revision instead (e.g. 0001, base): drops data."),
    ] = None,
    force: Annotated[
        bool, typer.Option(help="With --downgrade: go ahead even though the ledger has rows.")
    ] = False,
) -> None:
    """Bring the database schema to the latest Alembic revision (or --downgrade it)."""
    url = database_url or get_settings().database_url
    if downgrade is None:
        m.upgrade(url)
        typer.echo(f"schema at head: {_redact(url)}")
        return
    try:
        m.downgrade(url, downgrade, force=force)
    except CommandError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(code=1) from None
    typer.echo(f"schema at {downgrade}: {_redact(url)}")


@cli.command()
def serve(
    host: Annotated[str, typer.Option(help="Interface to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.")] = 8000,
    workers: Annotated[
        int,
        typer.Option(
            envvar="WEB_CONCURRENCY",
            min=1,
            help="Worker processes (default: WEB_CONCURRENCY, else 1; use 1 with SQLite).",
        ),
    ] = 1,
    database_url: Annotated[str | None, typer.Option(help="Database URL.")] = None,
) -> None:
    """Serve the HTTP API with uvicorn (uvloop + httptools)."""
    import os

    import uvicorn

    if database_url:
        os.environ["PRIVACY_LEDGER_DATABASE_URL"] = database_url
        get_settings.cache_clear()
    settings = get_settings()
    if settings.database_url.startswith("sqlite") and workers > 1:
        typer.echo(
            "note: SQLite writes are serialised in one process; extra workers do not help", err=True
        )
    if workers > 1 and not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        # prometheus-client's multiprocess mode: /metrics sums every worker's counters
        import tempfile

        os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="privacy-ledger-metrics-")
    typer.echo(
        f"privacy-ledger on http://{host}:{port} (database: {_redact(settings.database_url)})"
    )
    uvicorn.run(
        "app.main:app",
        host=host,
        port=port,
        workers=workers,
        loop="uvloop",
        http="httptools",
        log_level=settings.log_level.lower(),
        log_config=None,  # the app sends uvicorn's loggers through its JSON formatter
        access_log=False,  # the app writes one access line per request, with its request id
    )


@cli.command()
def verify(
    rebuild: Annotated[
        bool, typer.Option(help="Rewrite totals that drifted from the ledger.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Recompute every dataset's totals from its ledger and report any drift (exit 1 on drift)."""
    db = Database(get_settings().database_url)
    try:
        report = run_verify(db, SYSTEM, rebuild=rebuild).model_dump(mode="json")
    finally:
        db.dispose()
    if as_json:
        typer.echo(json.dumps(report, indent=2))
    else:
        for d in report["datasets"]:
            state = (
                "ok"
                if d["ok"]
                else "DRIFT " + ",".join(d["drift"]) + (" (rebuilt)" if d.get("rebuilt") else "")
            )
            typer.echo(f"{d['name']:<32} {d['entries']:>10} entries  {state}")
        typer.echo("all totals match the ledger" if report["ok"] else "drift found")
    if not report["ok"] and not rebuild:
        raise typer.Exit(code=1)


# --- client commands (HTTP) -------------------------------------------------------------------

URL = Annotated[str | None, typer.Option("--url", help="Server URL (default: PRIVACY_LEDGER_URL).")]
KEY = Annotated[
    str | None, typer.Option("--api-key", help="API key (default: PRIVACY_LEDGER_API_KEY).")
]
JSON_OUT = Annotated[bool, typer.Option("--json", help="Machine-readable JSON output.")]
console = Console()


def _client(url: str | None, api_key: str | None) -> Any:
    return http_client.LedgerClient(url=url, api_key=api_key, retries=2)


def _run(fn: Any) -> Any:
    """Call the server; print a clean error (not a traceback) and exit 1 on failure, 2 when
    refused for budget."""
    try:
        return fn()
    except http_client.LedgerError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(code=2 if isinstance(exc, http_client.BudgetExceeded) else 1) from None


def _fmt(x: float | None, digits: int = 4) -> str:
    return (
        "-" if x is None else f"{x:.{digits}g}" if abs(x) < 1e-3 and x != 0 else f"{x:.{digits}f}"
    )


datasets_cli = typer.Typer(help="List or create datasets.", invoke_without_command=True)
cli.add_typer(datasets_cli, name="datasets")


@datasets_cli.callback()
def datasets_list(
    ctx: typer.Context, url: URL = None, api_key: KEY = None, as_json: JSON_OUT = False
) -> None:
    """List datasets with budget, spend and remaining (the default action)."""
    if ctx.invoked_subcommand is not None:
        return
    with _client(url, api_key) as c:
        items = [d.raw for d in _run(c.datasets)]
    if as_json:
        typer.echo(json.dumps(items, indent=2))
        return
    table = Table(title="datasets")
    for col in (
        "name",
        "id",
        "filter",
        "budget (eps, delta)",
        "spent eps",
        "remaining eps",
        "entries",
        "",
    ):
        table.add_column(col)
    for d in items:
        table.add_row(
            d["name"],
            d["id"],
            d["filter"],
            f"{d['budget']['epsilon']:g}, {d['budget']['delta']:g}",
            _fmt(d["spent"]["epsilon"]),
            _fmt(d["remaining"]["epsilon"]),
            str(d["entries"]),
            "EXHAUSTED" if d["exhausted"] else "",
        )
    console.print(table)


@datasets_cli.command("create")
def datasets_create(
    name: str,
    epsilon: Annotated[float, typer.Option(help="Budget epsilon.")],
    delta: Annotated[float, typer.Option(help="Budget delta.")],
    accounting: Annotated[str, typer.Option(help="rdp or zcdp.")] = "rdp",
    adaptive: Annotated[
        bool, typer.Option(help="Parameters may depend on earlier outputs.")
    ] = True,
    allow: Annotated[
        list[str] | None, typer.Option(help="Allowed mechanism kind (repeatable).")
    ] = None,
    url: URL = None,
    api_key: KEY = None,
    as_json: JSON_OUT = False,
) -> None:
    """Create a dataset (admin key)."""
    with _client(url, api_key) as c:
        d = _run(
            lambda: (
                c.create_dataset(
                    name,
                    epsilon,
                    delta,
                    accounting=accounting,
                    adaptive=adaptive,
                    allowed_mechanisms=allow or None,
                ).raw
            )
        )
    typer.echo(
        json.dumps(d, indent=2)
        if as_json
        else f"created {d['name']} ({d['id']}), filter {d['filter']}"
    )


@cli.command()
def status(dataset: str, url: URL = None, api_key: KEY = None, as_json: JSON_OUT = False) -> None:
    """Budget, spend, remaining and the top mechanisms of one dataset."""
    with _client(url, api_key) as c:
        d = _run(lambda: c.dataset(dataset).raw)
    if as_json:
        typer.echo(json.dumps(d, indent=2))
        return
    b, sp, rem = d["budget"], d["spent"], d["remaining"]
    table = Table(title=f"{d['name']} ({d['id']})", show_header=False)
    table.add_column("what")
    table.add_column("value")
    table.add_row("budget", f"epsilon {b['epsilon']:g}, delta {b['delta']:g}")
    table.add_row(
        "filter", f"{d['filter']} (accounting {d['accounting']}, adaptive {d['adaptive']})"
    )
    table.add_row(
        "spent", f"epsilon {_fmt(sp['epsilon'], 6)} at delta {sp['delta']:g} ({sp['method']})"
    )
    table.add_row("rho", _fmt(sp["rho"], 6))
    table.add_row(
        "remaining",
        f"epsilon {_fmt(rem['epsilon'], 6)}"
        + (f", rho {_fmt(rem['rho'], 6)}" if rem["rho"] is not None else ""),
    )
    table.add_row("entries", str(d["entries"]))
    table.add_row("status", "EXHAUSTED" if d["exhausted"] else "open")
    console.print(table)
    counts = d.get("mechanism_counts") or {}
    if counts:
        top = Table(title="mechanisms by rho")
        for col in ("kind", "entries", "invocations", "rho"):
            top.add_column(col)
        ranked = sorted(counts.items(), key=lambda kv: -(kv[1].get("rho") or 0.0))
        for kind, c in ranked[:5]:
            top.add_row(kind, str(c["entries"]), str(c["count"]), _fmt(c.get("rho"), 6))
        console.print(top)


def _mechanism_from_options(mechanism: str, raw: str | None, **params: Any) -> dict[str, Any]:
    if raw:
        parsed = json.loads(raw)
        if not isinstance(parsed, dict):
            raise typer.BadParameter("--mechanism-json must be a JSON object")
        return parsed
    return {"mechanism": mechanism, **{k: v for k, v in params.items() if v is not None}}


@cli.command()
def charge(
    dataset: str,
    mechanism: Annotated[
        str, typer.Option(help="Kind: gaussian, laplace, randomized_response, ...")
    ] = "gaussian",
    sigma: Annotated[float | None, typer.Option()] = None,
    sensitivity: Annotated[float | None, typer.Option()] = None,
    epsilon: Annotated[float | None, typer.Option()] = None,
    scale: Annotated[float | None, typer.Option()] = None,
    k: Annotated[int | None, typer.Option()] = None,
    sample_rate: Annotated[float | None, typer.Option()] = None,
    steps: Annotated[int | None, typer.Option()] = None,
    count: Annotated[int | None, typer.Option()] = None,
    mechanism_json: Annotated[str | None, typer.Option(help="The whole mechanism as JSON.")] = None,
    label: Annotated[str | None, typer.Option()] = None,
    dry_run: Annotated[bool, typer.Option(help="Only ask whether it would be admitted.")] = False,
    url: URL = None,
    api_key: KEY = None,
    as_json: JSON_OUT = False,
) -> None:
    """Charge one mechanism invocation to DATASET (exit 2 when refused for budget)."""
    m = _mechanism_from_options(
        mechanism,
        mechanism_json,
        sigma=sigma,
        sensitivity=sensitivity,
        epsilon=epsilon,
        scale=scale,
        k=k,
        sample_rate=sample_rate,
        steps=steps,
        count=count,
    )
    with _client(url, api_key) as c:
        answer = _run(
            lambda: (c.dry_run(dataset, m) if dry_run else c.charge(dataset, m, label=label)).raw
        )
    if as_json:
        typer.echo(json.dumps(answer, indent=2))
        return
    sp = answer.get("would_spend") if dry_run else answer["spent"]
    verb = "would be admitted" if dry_run else f"recorded as entry {answer['entry']['id']}"
    typer.echo(
        f"{verb}; spent epsilon {_fmt(sp['epsilon'], 6)} at delta {sp['delta']:g} ({sp['method']})"
    )


@cli.command()
def compose(
    file: Annotated[
        Path, typer.Argument(help='JSON file: a list of mechanisms (or {"mechanisms": [...]}).')
    ],
    delta: Annotated[float, typer.Option(help="Target delta.")] = 1e-6,
    accounting: Annotated[str, typer.Option(help="rdp or zcdp.")] = "rdp",
    url: URL = None,
    api_key: KEY = None,
    as_json: JSON_OUT = False,
) -> None:
    """What-if: the epsilon of a planned list of mechanisms (nothing is recorded)."""
    data = json.loads(file.read_text())
    mechanisms = data["mechanisms"] if isinstance(data, dict) else data
    with _client(url, api_key) as c:
        answer = _run(lambda: c.compose(mechanisms, delta, accounting).raw)
    if as_json:
        typer.echo(
            json.dumps({k: v for k, v in answer.items() if k not in ("orders", "rdp")}, indent=2)
        )
        return
    typer.echo(f"epsilon {_fmt(answer['epsilon'], 6)} at delta {delta:g} ({answer['method']})")
    for name, eps in sorted(answer["conversions"].items(), key=lambda kv: kv[1]):
        typer.echo(f"  {name:<18} {_fmt(eps, 6)}")


keys_cli = typer.Typer(help="Create, list and revoke API keys (admin).")
cli.add_typer(keys_cli, name="keys")


@keys_cli.command("create")
def keys_create(
    role: Annotated[str, typer.Option(help="admin, pipeline or viewer.")],
    dataset: Annotated[
        list[str] | None, typer.Option(help="Scope to a dataset id (repeatable).")
    ] = None,
    label: Annotated[str | None, typer.Option()] = None,
    local: Annotated[
        bool, typer.Option(help="Write to the database directly (on the server).")
    ] = False,
    url: URL = None,
    api_key: KEY = None,
    as_json: JSON_OUT = False,
) -> None:
    """Create a key; it is printed once and stored only as a slow salted digest."""
    if local:
        db = Database(get_settings().database_url)
        try:
            answer = key_service.create_key(db, SYSTEM, Role(role), dataset or None, label)
            created = answer.model_dump(mode="json")
        except ProblemError as exc:
            typer.echo(f"error: {exc.detail}", err=True)
            raise typer.Exit(code=1) from None
        finally:
            db.dispose()
    else:
        with _client(url, api_key) as c:
            created = _run(lambda: c.create_key(role, dataset or None, label).raw)
    if as_json:
        typer.echo(json.dumps(created, indent=2))
    else:
        typer.echo(
            f"{created['role']} key {created['id']} (shown once, store it now):\n{created['key']}"
        )


@keys_cli.command("list")
def keys_list(url: URL = None, api_key: KEY = None, as_json: JSON_OUT = False) -> None:
    """List keys (never the secrets)."""
    with _client(url, api_key) as c:
        items = [k.raw for k in _run(c.keys)]
    if as_json:
        typer.echo(json.dumps(items, indent=2))
        return
    table = Table(title="API keys")
    for col in ("id", "role", "datasets", "label", "created", "revoked"):
        table.add_column(col)
    for kk in items:
        table.add_row(
            kk["id"],
            kk["role"],
            ",".join(kk["datasets"] or []) or "all",
            kk["label"] or "",
            kk["created_at"] or "",
            kk["revoked_at"] or "",
        )
    console.print(table)


@keys_cli.command("revoke")
def keys_revoke(
    key_id: str, url: URL = None, api_key: KEY = None, as_json: JSON_OUT = False
) -> None:
    """Revoke a key."""
    with _client(url, api_key) as c:
        answer = _run(lambda: c.revoke_key(key_id).raw)
    typer.echo(json.dumps(answer, indent=2) if as_json else f"revoked {answer['id']}")


def _redact(url: str) -> str:
    """Hide a password in a database URL."""
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        creds, host = rest.rsplit("@", 1)
        user = creds.split(":", 1)[0]
        return f"{scheme}://{user}:***@{host}" if ":" in creds else url
    return url


def main() -> None:
    """Console-script entry point."""
    cli()


if __name__ == "__main__":
    main()
