"""Idempotency-Key answers can be pruned (an outside soak test: the table grew by a row of about
1.2 kB per keyed request and nothing ever deleted one): ``idempotency.prune`` in batches, the
server's sweeper when PRIVACY_LEDGER_IDEMPOTENCY_RETENTION_DAYS is set, and
``privacy-ledger prune-idempotency``. A key retried after its answer is gone is a new request."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError
from sqlalchemy import func, select, update
from typer.testing import CliRunner

from app import main as app_main
from app.cli import cli
from app.db.engine import Database
from app.db.models import IdempotencyRecord, utcnow
from app.services import idempotency
from tests.conftest import make_settings, new_dataset

LAPLACE = {"mechanism": {"mechanism": "laplace", "epsilon": 0.01}}


def _charge(client: TestClient, dataset: str, key: str) -> tuple[int, bool]:
    r = client.post(
        f"/v1/datasets/{dataset}/charges", json=LAPLACE, headers={"Idempotency-Key": key}
    )
    return r.status_code, r.headers.get("Idempotent-Replayed") == "true"


def _keys(db: Database) -> list[str]:
    with db.read() as s:
        return sorted(s.scalars(select(IdempotencyRecord.key)))


def _age(db: Database, keys: list[str], days: float) -> None:
    """Back-date the answers of ``keys`` by ``days`` (through the typed column)."""
    with db.write() as s:
        s.execute(
            update(IdempotencyRecord)
            .where(IdempotencyRecord.key.in_(keys))
            .values(created_at=utcnow() - timedelta(days=days))
        )


def _entries(client: TestClient, dataset: str) -> int:
    entries: int = client.get(f"/v1/datasets/{dataset}/budget").json()["entries"]
    return entries


def test_prune_deletes_old_answers_and_a_retry_of_one_is_a_new_request(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    ds = new_dataset(client, budget={"epsilon": 10.0, "delta": 1e-6})["id"]
    for key in ("old-1", "old-2", "old-3", "new"):
        assert _charge(client, ds, key) == (201, False)
    db: Database = client.app.state.db  # type: ignore[attr-defined]
    _age(db, ["old-1", "old-2", "old-3"], days=10)
    monkeypatch.setattr(idempotency, "PRUNE_BATCH", 2)  # three deleted over two transactions
    assert idempotency.prune(db, utcnow() - timedelta(days=7)) == 3
    assert _keys(db) == ["new"]
    assert idempotency.prune(db, utcnow() - timedelta(days=7)) == 0
    # the kept answer still replays; a pruned key's retry is charged again (documented)
    assert _charge(client, ds, "new") == (201, True)
    assert _entries(client, ds) == 4
    assert _charge(client, ds, "old-1") == (201, False)
    assert _entries(client, ds) == 5


@pytest.mark.parametrize("retention", [None, timedelta(days=7)])
def test_the_sweeper_prunes_only_with_a_retention(
    client: TestClient, retention: timedelta | None
) -> None:
    ds = new_dataset(client)["id"]
    for key in ("a", "b"):
        _charge(client, ds, key)
    db: Database = client.app.state.db  # type: ignore[attr-defined]
    _age(db, ["a"], days=8)

    async def one_round() -> None:
        stop = asyncio.Event()
        stop.set()  # the sweeper prunes on its first round, then sees the stop and returns
        await app_main._sweeper(db, stop, retention)

    asyncio.run(one_round())
    assert _keys(db) == (["a", "b"] if retention is None else ["b"])


def test_the_retention_setting_reaches_the_sweeper(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    given: list[timedelta | None] = []

    async def recorded(db: Database, stop: asyncio.Event, retention: timedelta | None) -> None:
        given.append(retention)
        await stop.wait()

    monkeypatch.setattr(app_main, "_sweeper", recorded)
    for days, expected in ((2.5, timedelta(days=2.5)), (None, None)):
        app = app_main.create_app(make_settings(db_url, idempotency_retention_days=days))
        with TestClient(app):
            pass
        assert given[-1] == expected
    for bad in (0, -1, "soon"):
        with pytest.raises(ValidationError, match="idempotency_retention_days"):
            make_settings(db_url, idempotency_retention_days=bad)
    assert make_settings(db_url, idempotency_retention_days=" ").idempotency_retention_days is None


def test_the_cli_prunes_and_refuses_a_non_positive_age(client: TestClient, db_url: str) -> None:
    ds = new_dataset(client)["id"]
    for key in ("x", "y"):
        _charge(client, ds, key)
    db: Database = client.app.state.db  # type: ignore[attr-defined]
    _age(db, ["x"], days=40)
    runner = CliRunner()
    r = runner.invoke(
        cli, ["prune-idempotency", "--older-than-days", "30", "--database-url", db_url, "--json"]
    )
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["deleted"] == 1
    with db.read() as s:
        assert s.scalar(select(func.count()).select_from(IdempotencyRecord)) == 1
    r = runner.invoke(
        cli, ["prune-idempotency", "--older-than-days", "0", "--database-url", db_url]
    )
    assert r.exit_code != 0 and "above 0" in r.output
    r = runner.invoke(cli, ["prune-idempotency", "--database-url", db_url])
    assert r.exit_code != 0 and "--older-than-days" in r.output
