"""A ledger export whose pooled read connection died (PostgreSQL restarted, or the backend was
terminated) after the dataset was checked and before a page was read. The export's status line
is sent before its pages are read, so such a failure cannot become the 503 other reads answer:
it cut the stream (the client saw "peer closed connection without sending complete message
body" and the server logged "response already started"). A page read again on a fresh
connection completes the export.

Found with three replicas on one PostgreSQL whose backends were terminated under load
(/work/notes/replicas45_scripts/s8_pg_terminate.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from app.db.engine import Database
from app.main import create_app
from app.principal import SYSTEM
from app.services import ledger
from tests.conftest import ADMIN, PG_URL, _fresh_database, make_settings, new_dataset, run_sql

pytestmark = pytest.mark.skipif(
    not PG_URL, reason="PostgreSQL tests skipped: PRIVACY_LEDGER_TEST_POSTGRES_URL is not set"
)


@pytest.fixture
def pg(tmp_path: Path, sqlite_template: Path) -> Iterator[tuple[TestClient, Database, str]]:
    url = _fresh_database("postgres", tmp_path, sqlite_template)
    app = create_app(make_settings(url))
    with TestClient(app) as c:
        c.headers.update(ADMIN)
        yield c, app.state.db, url


def _one_pooled_reader(db: Database) -> int:
    """Leave exactly one idle connection in the readers' pool; its backend's pid."""
    db.read_engine.dispose()
    with db.read_core() as conn:
        pid: int = conn.execute(text("SELECT pg_backend_pid()")).scalar_one()
    return pid


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_an_export_reads_its_page_again_when_its_connection_died(
    pg: tuple[TestClient, Database, str], fmt: str
) -> None:
    client, db, url = pg
    ds = new_dataset(client, "exported", budget={"epsilon": 10.0, "delta": 1e-6})
    charged = []
    for _ in range(3):
        r = client.post(
            f"/v1/datasets/{ds['id']}/charges",
            json={"mechanism": {"mechanism": "laplace", "epsilon": 0.5}},
        )
        assert r.status_code == 201, r.text
        charged.append(r.json()["entry"]["id"])
    pid = _one_pooled_reader(db)
    stream = ledger.export_entries(db, SYSTEM, ds["id"], fmt)  # checks the dataset on it
    assert run_sql(url, "SELECT pg_terminate_backend(:pid)", pid=pid) == [(True,)]
    lines = "".join(stream).splitlines()
    if fmt == "jsonl":
        assert [json.loads(line)["id"] for line in lines] == charged
    else:
        assert lines[0].split(",")[0] == ledger.CSV_COLUMNS[0]
        assert len(lines) == 1 + len(charged)
