"""What the commands that run where the server runs (``serve``, ``migrate``, ``verify``,
``keys create --local``) share: the ``--database-url`` option, the settings (an invalid one is
one line, not a traceback), a URL without its password for messages, and ``opened``, which turns
a database the URL does not name, cannot reach or cannot open into one line.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError

from app.cli.common import fail
from app.config import Settings, get_settings, invalid_settings

DATABASE_ENV = "PRIVACY_LEDGER_DATABASE_URL"

DATABASE_URL = Annotated[
    str | None,
    typer.Option(
        "--database-url",
        help=f"SQLAlchemy database URL (default: {DATABASE_ENV}, else "
        "sqlite:///./privacy_ledger.db).",
        show_default=False,
    ),
]

EXAMPLES = "e.g. sqlite:///./privacy_ledger.db or postgresql+psycopg://user@host/db"


def settings() -> Settings:
    """The server's settings from the environment; an invalid one ends the command with one
    ``error:`` line naming each invalid setting (``get_settings`` raised, and the CLI showed
    a traceback as for a bug of its own)."""
    try:
        return get_settings()
    except ValidationError as exc:
        fail("invalid configuration: " + "; ".join(invalid_settings(exc)))


def redact(url: str) -> str:
    """Hide a password in a database URL."""
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        creds, host = rest.rsplit("@", 1)
        user = creds.split(":", 1)[0]
        return f"{scheme}://{user}:***@{host}" if ":" in creds else url
    return url


def _driver(url: str) -> None:
    """Fail unless ``url`` is a database URL whose driver is installed (``mysql://`` asked for
    MySQLdb, which ends in a ModuleNotFoundError deep inside SQLAlchemy)."""
    from sqlalchemy import make_url
    from sqlalchemy.exc import SQLAlchemyError

    try:
        dialect = make_url(url).get_dialect()
    except SQLAlchemyError as exc:  # not a URL, or a dialect SQLAlchemy does not know
        fail(
            f"{redact(url)!r} is not a database URL ({exc}); set {DATABASE_ENV} or "
            f"--database-url, {EXAMPLES}"
        )
    try:
        dialect.import_dbapi()
    except ImportError as exc:
        fail(
            f"{redact(url)!r} needs the database driver {exc.name or dialect.driver!r}, which "
            f"is not installed; privacy-ledger runs on SQLite and PostgreSQL ({EXAMPLES})"
        )


def _missing_sqlite_file(url: str) -> Path | None:
    """The absolute path of the SQLite file ``url`` names, if it names one that is not there
    (a relative one is relative to the working directory, as SQLite opens it)."""
    from sqlalchemy import make_url

    parsed = make_url(url)
    name = parsed.database
    if parsed.get_backend_name() != "sqlite" or not name or name == ":memory:":
        return None
    if name.startswith("file:"):  # a URI filename: SQLite's own rules, left to SQLite
        return None
    path = Path(name).absolute()
    return None if path.exists() else path


@contextmanager
def opened(url: str, doing: str, hint: str = "", *, existing: bool = False) -> Iterator[None]:
    """Run database work for a command (``doing``: "migrate", "verify", ...); a URL that is not
    a database URL, names a driver that is not installed, or a database that cannot be reached
    or read (refused connection, not a database file, a directory that does not exist) ends
    the command with ``error: cannot <doing> the database at <url>: <why>`` and the setting to
    check. Errors of any other kind are not the database's and pass through.

    ``existing``: the command reads a ledger that must be there (``verify``, ``keys create
    --local``, ``prune-idempotency``), so a SQLite file that is not there is named by its
    absolute path and not created: connecting made an empty file wherever the command ran
    (README's "run from this directory" missed by one ``cd``) and answered "no such table"."""
    from sqlalchemy.exc import DBAPIError, SQLAlchemyError  # (server commands only)

    _driver(url)
    where = redact(url)
    missing = _missing_sqlite_file(url) if existing else None
    if missing is not None:
        fail(
            f"cannot {doing} the database at {where}: no database file at {missing} (a "
            f"relative path is relative to the directory the command runs in; the server's "
            f"file is the one its {DATABASE_ENV} names, ./privacy_ledger.db where it was "
            f"started by default). Check {DATABASE_ENV} or --database-url."
        )  # (not the hint to migrate: that would make an empty ledger in the wrong place)
    try:
        yield
    except SQLAlchemyError as exc:
        why = str(exc.orig if isinstance(exc, DBAPIError) else exc).strip().splitlines()
        fail(
            f"cannot {doing} the database at {where}: {type(exc).__name__}: "
            f"{why[0] if why else ''}. Check {DATABASE_ENV} or --database-url{hint}."
        )
    except OSError as exc:  # a SQLite file (or its lock file) in a directory that is not there
        if exc.filename is None:
            raise
        fail(
            f"cannot {doing} the database at {where}: {exc.strerror or exc}: {exc.filename}. "
            f"Check {DATABASE_ENV} or --database-url{hint}."
        )


__all__ = ["DATABASE_ENV", "DATABASE_URL", "opened", "redact"]
