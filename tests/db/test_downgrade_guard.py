"""Issue 10, item 7: a downgrade below head does not drop a populated ledger unless forced.

Through every door: ``app.db.migrate.downgrade``, ``privacy-ledger migrate --downgrade`` (with
``--force``), and plain ``alembic downgrade`` from the repository root (with ``-x force=true``).
Each test ends at head again (the shared PostgreSQL database is reused by later tests).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
from alembic.util import CommandError
from sqlalchemy import create_engine, inspect, text

from app.accounting.mechanisms import Laplace
from app.db import migrate
from app.db.engine import Database
from app.db.models import Base
from app.services import charges, datasets
from app.services.keys import SYSTEM
from tests.conftest import reserve_hold
from tests.live import ROOT

ALEMBIC = str(ROOT / ".venv" / "bin" / "alembic") if (ROOT / ".venv").exists() else "alembic"


def _populate(url: str) -> None:
    db = Database(url)
    try:
        ds = datasets.create_dataset(db, SYSTEM, name="kept", budget_epsilon=1.0, budget_delta=1e-6)
        mech = Laplace(epsilon=0.1)
        charges.charge(db, SYSTEM, ds.id, mechanism=mech, wire=mech.to_dict())
    finally:
        db.dispose()


def _ledger_rows(url: str) -> int | None:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            if not inspect(conn).has_table("ledger_entry"):
                return None
            return int(conn.execute(text("SELECT count(*) FROM ledger_entry")).scalar_one())
    finally:
        engine.dispose()


def _revision(url: str) -> str | None:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            if not inspect(conn).has_table("alembic_version"):
                return None
            return conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
    finally:
        engine.dispose()


@pytest.fixture
def populated(db_url: str) -> Iterator[str]:
    _populate(db_url)
    yield db_url
    migrate.upgrade(db_url)  # leave the schema at head for the next test


def _head() -> str:
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(migrate.alembic_config("sqlite://")).get_current_head()
    assert head is not None
    return head


@pytest.mark.parametrize("target", ["base", "0001", "-1"])
def test_downgrade_refuses_a_populated_ledger(populated: str, target: str) -> None:
    with pytest.raises(CommandError, match="refusing to downgrade: the ledger has 1 entries"):
        migrate.downgrade(populated, target)
    assert _revision(populated) == _head() and _ledger_rows(populated) == 1
    migrate.downgrade(populated, target, force=True)
    assert _revision(populated) != _head()


def _cli(*args: str, url: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PRIVACY_LEDGER_DATABASE_URL": url}
    env.pop("PRIVACY_LEDGER_ADMIN_KEY", None)
    return subprocess.run(
        [sys.executable, "-m", "app.cli", "migrate", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_cli_downgrade_needs_force(populated: str) -> None:
    refused = _cli("--downgrade", "base", url=populated)
    assert refused.returncode == 1 and "--force" in refused.stderr
    assert _ledger_rows(populated) == 1
    forced = _cli("--downgrade", "base", "--force", url=populated)
    assert forced.returncode == 0, forced.stderr
    assert _ledger_rows(populated) is None  # every table is gone
    assert _cli(url=populated).returncode == 0  # and back to head
    assert _revision(populated) == _head()


def _alembic(*args: str, url: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PRIVACY_LEDGER_DATABASE_URL": url}
    env.pop("PRIVACY_LEDGER_ADMIN_KEY", None)
    return subprocess.run(
        [ALEMBIC, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )


def test_plain_alembic_downgrade_needs_x_force(populated: str) -> None:
    refused = _alembic("downgrade", "base", url=populated)
    said = refused.stdout + refused.stderr  # alembic prints "FAILED: ..." on stdout
    assert refused.returncode != 0 and "refusing to downgrade" in said, said
    assert _ledger_rows(populated) == 1 and _revision(populated) == _head()
    forced = _alembic("-x", "force=true", "downgrade", "base", url=populated)
    assert forced.returncode == 0, forced.stderr
    assert _revision(populated) is None
    up = _alembic("upgrade", "head", url=populated)
    assert up.returncode == 0, up.stderr
    engine = create_engine(populated)
    try:
        assert set(inspect(engine).get_table_names()) >= set(Base.metadata.tables)
    finally:
        engine.dispose()


def test_an_empty_ledger_downgrades_without_force(db_url: str) -> None:
    migrate.downgrade(db_url, "base")
    assert _revision(db_url) is None
    migrate.upgrade(db_url)


def test_datasets_and_holds_without_entries_are_not_dropped_unforced(db_url: str) -> None:
    """A dataset (its budget, allocations, archive mark) and an active hold made before any
    charge are data too: the base revision's downgrade dropped them, unforced, because only
    ``ledger_entry`` was counted."""
    db = Database(db_url)
    try:
        ds = datasets.create_dataset(db, SYSTEM, name="kept", budget_epsilon=1.0, budget_delta=1e-6)
        reserve_hold(db, ds.id, Laplace(epsilon=0.1))
    finally:
        db.dispose()
    assert _ledger_rows(db_url) == 0
    try:
        with pytest.raises(CommandError, match="refusing to downgrade"):
            migrate.downgrade(db_url, "base")
        assert _revision(db_url) == _head()
        engine = create_engine(db_url)
        try:
            with engine.connect() as conn:
                names = conn.execute(text("SELECT name FROM dataset")).scalars().all()
                holds = conn.execute(text("SELECT count(*) FROM reservation")).scalar_one()
        finally:
            engine.dispose()
        assert names == ["kept"] and holds == 1
    finally:
        migrate.upgrade(db_url)
