"""A migrator killed half way through a revision leaves the database at the revision before,
whole, and the next ``migrate`` finishes the upgrade (both backends).

On SQLite, pysqlite opened a transaction only before a row change, so revision 0007's
``ALTER TABLE ... ADD COLUMN`` statements (it changes no row) were committed one by one: killed
after the first, the database stayed at 0006 with ``dataset.partition_unit`` already added, and
every later ``migrate`` (and start-up) failed with "duplicate column name".
"""

from __future__ import annotations

import subprocess
import sys

from sqlalchemy import create_engine, inspect, text

from app.db import migrate
from app.db.models import Base
from tests.live import ROOT

# dies (as a SIGKILL would: no rollback sent, no cleanup) when revision 0007 creates its
# ``allocation`` table, after it altered dataset, ledger_entry, reservation and api_key
_KILLED_MIGRATOR = """
import os, sys
from alembic.operations import Operations
from app.db import migrate

create_table = Operations.create_table

def dying(self, name, *columns, **kw):
    if name == "allocation":
        os._exit(9)
    return create_table(self, name, *columns, **kw)

Operations.create_table = dying
migrate.upgrade(sys.argv[1])
"""


def _revision(url: str) -> str | None:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
    finally:
        engine.dispose()


def _columns(url: str, table: str) -> set[str]:
    engine = create_engine(url)
    try:
        return {c["name"] for c in inspect(engine).get_columns(table)}
    finally:
        engine.dispose()


def test_a_killed_migration_rolls_back_and_the_next_one_finishes(db_url: str) -> None:
    migrate.downgrade(db_url, "0006")  # an empty database: no force needed
    before = {t: _columns(db_url, t) for t in ("dataset", "ledger_entry", "reservation")}
    killed = subprocess.run(
        [sys.executable, "-c", _KILLED_MIGRATOR, db_url],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert killed.returncode == 9, killed.stderr
    assert _revision(db_url) == "0006"
    assert {t: _columns(db_url, t) for t in before} == before  # nothing of 0007 is left
    migrate.upgrade(db_url)
    engine = create_engine(db_url)
    try:
        assert set(inspect(engine).get_table_names()) >= set(Base.metadata.tables)
    finally:
        engine.dispose()
    assert "partition_unit" in _columns(db_url, "dataset")
