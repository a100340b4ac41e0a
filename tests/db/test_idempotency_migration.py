"""Migration 0009: idempotency records become per API key (h3 finding 5).

Records written before it (per dataset only) get the key that made them, found from what their
answer points at (ledger entries, the reservation, the rejection written with a refusal), so a
retry by that key still replays, another key's request with the same value is its own, and a
record whose key is found nowhere refuses every key (422) instead of charging twice or showing
one key another's answer. Each test ends at head (the PostgreSQL database is reused).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import create_engine, inspect, text

from app.accounting.mechanisms import Laplace
from app.db import migrate
from app.db.engine import Database
from app.main import create_app
from app.principal import SYSTEM
from app.services import charges, verification
from tests.conftest import ADMIN, make_settings, new_dataset

GAUSS = {"mechanism": {"mechanism": "gaussian", "sigma": 10.0}, "label": "daily"}
BIG = {"mechanism": {"mechanism": "laplace", "epsilon": 5.0}}
EVENT = {"dp_event": {"type": "GaussianDpEvent", "noise_multiplier": 10.0}}
HOLD = {"mechanism": {"mechanism": "laplace", "epsilon": 0.01}}


@contextmanager
def _client(url: str) -> Iterator[TestClient]:
    with TestClient(create_app(make_settings(url))) as c:
        c.headers.update(ADMIN)
        yield c


def _key(c: TestClient, ds: dict[str, Any]) -> tuple[str, dict[str, str]]:
    made = c.post("/v1/keys", json={"role": "pipeline", "datasets": [ds["id"]]}).json()
    return made["id"], {"Authorization": f"Bearer {made['key']}"}


def _records(url: str) -> dict[str, str | None]:
    """Idempotency-Key value -> key_id of every record."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(text("SELECT key, key_id FROM idempotency_record")).all()
    finally:
        engine.dispose()
    return {str(k): kid for k, kid in rows}


def _columns(url: str) -> set[str]:
    engine = create_engine(url)
    try:
        return {c["name"] for c in inspect(engine).get_columns("idempotency_record")}
    finally:
        engine.dispose()


def _insert_record(url: str, dataset_id: str, key: str, status: int, response: dict) -> None:
    """A record as revision 0008 wrote it (no key_id)."""
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO idempotency_record (dataset_id, key, scope, request_hash, "
                    "status_code, response, created_at) VALUES (:d, :k, 'charge', :h, :s, :r, :t)"
                ),
                {
                    "d": dataset_id,
                    "k": key,
                    "h": "0" * 64,
                    "s": status,
                    "r": json.dumps(response),
                    "t": datetime.now(UTC),
                },
            )
    finally:
        engine.dispose()


def test_records_made_before_0009_keep_the_key_that_made_them(db_url: str) -> None:
    with _client(db_url) as c:
        ds = new_dataset(c)
        url = f"/v1/datasets/{ds['id']}"
        (a_id, a), (b_id, b) = _key(c, ds), _key(c, ds)
        [admin_id] = [k["id"] for k in c.get("/v1/keys").json()["keys"] if k["role"] == "admin"]
        answers = {
            "a-charge": c.post(
                f"{url}/charges", json=GAUSS, headers={**a, "Idempotency-Key": "a-charge"}
            ),
            "a-event": c.post(
                f"{url}/charges/dp_event", json=EVENT, headers={**a, "Idempotency-Key": "a-event"}
            ),
            "b-hold": c.post(
                f"{url}/reservations", json=HOLD, headers={**b, "Idempotency-Key": "b-hold"}
            ),
            "admin": c.post(f"{url}/charges", json=HOLD, headers={"Idempotency-Key": "admin"}),
        }
        # B's refusal between two of A's, with the same spend and request: its own rejection is
        # the one written with it (the latest at or before the record)
        assert c.post(f"{url}/charges", json=BIG, headers=a).status_code == 409
        answers["b-big"] = c.post(
            f"{url}/charges", json=BIG, headers={**b, "Idempotency-Key": "b-big"}
        )
        assert c.post(f"{url}/charges", json=BIG, headers=a).status_code == 409
    assert [r.status_code for r in answers.values()] == [201, 201, 201, 201, 409]
    db = Database(db_url)
    try:  # the service acting on its own (no API key)
        charges.charge(
            db,
            SYSTEM,
            ds["id"],
            mechanism=Laplace(0.01),
            wire=Laplace(0.01).to_dict(),
            idempotency_key="system-1",
        )
    finally:
        db.dispose()

    migrate.downgrade(db_url, "0008", force=True)
    try:
        assert "key_id" not in _columns(db_url)
        # a refusal whose rejection cannot be found (its spend matches none)
        _insert_record(db_url, ds["id"], "lost", 409, {"detail": "over budget", "spent": {}})
    finally:
        migrate.upgrade(db_url)

    assert _records(db_url) == {
        "a-charge": a_id,
        "a-event": a_id,
        "b-hold": b_id,
        "admin": admin_id,
        "b-big": b_id,
        "system-1": "system",
        "lost": None,
    }
    with _client(db_url) as c:
        entries = c.get(f"{url}/budget").json()["entries"]
        # each key's retry replays its first answer
        again = c.post(f"{url}/charges", json=GAUSS, headers={**a, "Idempotency-Key": "a-charge"})
        assert again.status_code == 201 and again.json() == answers["a-charge"].json()
        hold = c.post(f"{url}/reservations", json=HOLD, headers={**b, "Idempotency-Key": "b-hold"})
        assert hold.status_code == 201 and hold.json() == answers["b-hold"].json()
        refused = c.post(f"{url}/charges", json=BIG, headers={**b, "Idempotency-Key": "b-big"})
        assert refused.status_code == 409 and refused.json() == answers["b-big"].json()
        assert len(c.get("/v1/rejections", params={"dataset": ds["id"]}).json()["rejections"]) == 3
        assert c.get(f"{url}/budget").json()["entries"] == entries
        # another key with the same value and body is another charge
        theirs = c.post(f"{url}/charges", json=GAUSS, headers={**b, "Idempotency-Key": "a-charge"})
        assert theirs.status_code == 201 and theirs.json()["entry"]["key_id"] == b_id
        assert c.get(f"{url}/budget").json()["entries"] == entries + 1
        # a record whose key is unknown is nobody's: refused, nothing charged
        for auth in (a, b, {}):
            lost = c.post(f"{url}/charges", json=GAUSS, headers={**auth, "Idempotency-Key": "lost"})
            assert lost.status_code == 422 and "new Idempotency-Key" in lost.json()["detail"]
        assert c.get(f"{url}/budget").json()["entries"] == entries + 1
    db = Database(db_url)
    try:
        assert verification.verify(db, SYSTEM).ok
    finally:
        db.dispose()


def test_downgrade_keeps_the_first_of_records_that_share_a_value(db_url: str) -> None:
    with _client(db_url) as c:
        ds = new_dataset(c)
        (a_id, a), (_, b) = _key(c, ds), _key(c, ds)
        for auth in (a, b):
            r = c.post(
                f"/v1/datasets/{ds['id']}/charges",
                json=GAUSS,
                headers={**auth, "Idempotency-Key": "shared"},
            )
            assert r.status_code == 201
    migrate.downgrade(db_url, "0008", force=True)
    try:
        engine = create_engine(db_url)
        try:
            with engine.connect() as conn:
                kept = conn.execute(text("SELECT key FROM idempotency_record")).scalars().all()
                uniques = inspect(conn).get_unique_constraints("idempotency_record")
        finally:
            engine.dispose()
        assert kept == ["shared"]
        assert [u["column_names"] for u in uniques] == [["dataset_id", "key"]]
    finally:
        migrate.upgrade(db_url)
    assert _records(db_url) == {"shared": a_id}
