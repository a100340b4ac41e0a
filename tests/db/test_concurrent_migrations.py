"""Several workers start at once on a fresh database: each migrates; every one succeeds and the
schema ends at head once (SQLite: a file lock beside the database; PostgreSQL: an advisory lock)."""

from __future__ import annotations

import subprocess
import sys

from sqlalchemy import create_engine, text

from tests.live import ROOT

MIGRATE = "import sys; from app.db import migrate; migrate.upgrade(sys.argv[1])"


def test_four_processes_migrate_one_database_at_once(db_url: str, tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'fresh.db'}" if db_url.startswith("sqlite") else db_url
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", MIGRATE, url],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    # communicate reads the pipes while waiting (wait() first could block on a full pipe)
    outcomes = [(p.returncode, err) for p in procs for _, err in [p.communicate(timeout=600)]]
    assert [code for code, _ in outcomes] == [0, 0, 0, 0], [err[-500:] for _, err in outcomes]
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            versions = conn.execute(text("SELECT version_num FROM alembic_version")).all()
    finally:
        engine.dispose()
    assert len(versions) == 1
