"""The ``privacy-ledger`` command (also ``python -m app.cli``).

Server-side commands (talk to the database directly): ``serve``, ``migrate``, ``verify``.
"""

from __future__ import annotations

import json
from typing import Annotated

import typer

from app.config import get_settings

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
) -> None:
    """Bring the database schema to the latest Alembic revision."""
    from app.db import migrate as m

    url = database_url or get_settings().database_url
    m.upgrade(url)
    typer.echo(f"schema at head: {_redact(url)}")


@cli.command()
def serve(
    host: Annotated[str, typer.Option(help="Interface to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.")] = 8000,
    workers: Annotated[int, typer.Option(help="Worker processes (use 1 with SQLite).")] = 1,
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
        log_level="info",
    )


@cli.command()
def verify(
    rebuild: Annotated[
        bool, typer.Option(help="Rewrite totals that drifted from the ledger.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Recompute every dataset's totals from its ledger and report any drift (exit 1 on drift)."""
    from app.db.engine import Database
    from app.services.ledger import verify as run_verify

    db = Database(get_settings().database_url)
    try:
        report = run_verify(db, rebuild=rebuild)
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
