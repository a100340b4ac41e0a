"""Bring the schema to Alembic head (``python -m app.cli migrate`` and app start-up), and the
guard that keeps a downgrade from dropping a populated ledger.

A downgrade below head drops what the newer schema holds (the first revision's downgrade drops
the ledger itself), so every revision's ``downgrade()`` first calls
:func:`refuse_populated_downgrade`: while the database holds ledger entries, datasets or
reservations it refuses, unless forced
with ``alembic -x force=true downgrade <rev>``, ``privacy-ledger migrate --downgrade <rev>
--force`` or ``downgrade(url, rev, force=True)``.
"""

from __future__ import annotations

import fcntl
import functools
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from alembic import command, context, op
from alembic.config import Config
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy import create_engine, inspect, make_url, text

_APP_DIR = Path(__file__).resolve().parent.parent
_ADVISORY_LOCK_ID = 0x70726976  # "priv": one migrator at a time across replicas


def migrations_dir() -> Path:
    """The Alembic scripts: ``app/_migrations`` in an installed wheel (pyproject maps the
    top-level ``migrations/`` there), else ``migrations/`` beside ``app/`` in a checkout."""
    for candidate in (_APP_DIR / "_migrations", _APP_DIR.parent / "migrations"):
        if (candidate / "env.py").is_file():
            return candidate
    raise RuntimeError(
        f"no Alembic scripts in {_APP_DIR / '_migrations'} or {_APP_DIR.parent / 'migrations'}: "
        "the installation is incomplete (reinstall privacy-ledger)"
    )


def alembic_config(url: str) -> Config:
    """Alembic configuration for ``url`` with our migrations directory."""
    cfg = Config()
    cfg.set_main_option("script_location", str(migrations_dir()))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


@contextmanager
def _sqlite_migration_lock(url: str) -> Iterator[None]:
    """One migrator at a time on a SQLite file (several workers start at once): an exclusive
    ``flock`` on ``<database>.migrate-lock`` beside it; nothing for an in-memory database."""
    path = make_url(url).database
    if not path or path == ":memory:":
        yield
        return
    with open(f"{path}.migrate-lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def upgrade(url: str, revision: str = "head") -> None:
    """Upgrade the database at ``url`` to ``revision``, one migrator at a time: a file lock on
    SQLite, an advisory lock on PostgreSQL (the others then find the schema at head)."""
    cfg = alembic_config(url)
    if url.startswith("sqlite"):
        with _sqlite_migration_lock(url):
            command.upgrade(cfg, revision)
        return
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": _ADVISORY_LOCK_ID})
            try:
                cfg.attributes["connection"] = conn
                command.upgrade(cfg, revision)
                conn.commit()
            finally:
                conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": _ADVISORY_LOCK_ID})
                conn.commit()
    finally:
        engine.dispose()


def downgrade(url: str, revision: str = "base", *, force: bool = False) -> None:
    """Downgrade the database at ``url`` to ``revision``; refused (``CommandError``) while the
    database holds ledger entries, datasets or reservations unless ``force``."""
    cfg = alembic_config(url)
    cfg.attributes["force"] = force
    command.downgrade(cfg, revision)


_TRUE = ("1", "true", "yes", "on")


def refuse_populated_downgrade() -> None:
    """Called first by every migration's ``downgrade()``: ``CommandError`` while the ledger has
    rows or any dataset or reservation exists, unless forced (``-x force=true`` or
    ``Config.attributes["force"]``). Offline (``--sql``) runs only print SQL and are not
    checked."""
    if context.is_offline_mode():
        return
    x_force = context.get_x_argument(as_dictionary=True).get("force", "")
    if context.config.attributes.get("force") is True or x_force.lower() in _TRUE:
        return
    conn = op.get_bind()
    rows, datasets, holds = (
        conn.execute(text(f"SELECT count(*) FROM {table}")).scalar_one()
        for table in ("ledger_entry", "dataset", "reservation")
    )
    # datasets and holds before any charge are data too: their budgets, allocations, archive
    # marks and held budget go with the revision that holds them (the base drops them all)
    if rows or datasets or holds:
        raise CommandError(
            f"refusing to downgrade: the ledger has {rows} entries ({datasets} datasets, "
            f"{holds} reservations) and a downgrade below head "
            "drops data; back the database up, then force it with "
            "'alembic -x force=true downgrade <revision>' or "
            "'privacy-ledger migrate --downgrade <revision> --force'"
        )


@functools.lru_cache(maxsize=1)
def _revisions() -> tuple[str, frozenset[str]]:
    """This release's head revision and every revision it knows."""
    scripts = ScriptDirectory.from_config(alembic_config("sqlite://"))
    head = scripts.get_current_head()
    assert head is not None
    return head, frozenset(r.revision for r in scripts.walk_revisions())


def behind_head(revision: str | None) -> str | None:
    """Why a database at ``revision`` cannot be served by this release (None when it can): an
    older revision this release knows (the upgrade has not run: ``PRIVACY_LEDGER_AUTO_MIGRATE``
    is off, or the migrator has not finished) lacks columns every request reads. A revision
    this release does not know (written by a newer one) is not refused here."""
    head, known = _revisions()
    if revision == head or (revision is not None and revision not in known):
        return None
    return (
        f"the schema is at revision {revision or 'none'} and this release needs {head}: "
        "run 'privacy-ledger migrate'"
    )


def is_at_head(url: str) -> bool:
    """Whether the schema exists (the ``dataset`` table is present)."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return inspect(conn).has_table("alembic_version") and inspect(conn).has_table("dataset")
    finally:
        engine.dispose()


__all__ = [
    "alembic_config",
    "behind_head",
    "downgrade",
    "is_at_head",
    "migrations_dir",
    "refuse_populated_downgrade",
    "upgrade",
]
