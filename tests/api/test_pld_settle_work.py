"""Expiring many holds of a ``pld`` dataset at once: each expiry used to compose every hold
that remained again (a PLD cannot be subtracted), O(holds^2) compositions under the dataset's
lock (100 due holds took 12 s; SQLite's other writers then failed). The remaining holds are now
composed once per batch. Work is counted (compositions), not timed."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text

from app.accounting.pld import Pld
from tests.conftest import expire_active_holds, new_dataset

HOLDS = 20


def test_expiring_a_batch_of_pld_holds_composes_linearly(
    client: TestClient, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    ds = new_dataset(
        client, accounting="pld", adaptive=False, budget={"epsilon": 50.0, "delta": 1e-6}
    )
    url = f"/v1/datasets/{ds['id']}"
    for k in range(HOLDS):
        m = {"mechanism": "laplace", "epsilon": 0.01 * (k + 1)}
        assert client.post(f"{url}/reservations", json={"mechanism": m}).status_code == 201
    keep = client.post(
        f"{url}/reservations",
        json={"mechanism": {"mechanism": "laplace", "epsilon": 0.5}, "ttl_seconds": 3600},
    )
    assert keep.status_code == 201
    expire_active_holds(db_url)
    # the hold to keep is made active again with a later expiry
    engine = create_engine(db_url)
    try:
        with engine.begin() as conn:
            conn.execute(
                text(
                    "UPDATE reservation SET expires_at = CURRENT_TIMESTAMP + INTERVAL '1 hour' "
                    "WHERE id = :id"
                )
                if db_url.startswith("postgresql")
                else text(
                    "UPDATE reservation SET expires_at = datetime('now', '+1 hour') WHERE id = :id"
                ),
                {"id": keep.json()["id"]},
            )
    finally:  # a failed statement must not leave the engine's connection to a later test
        engine.dispose()
    calls = 0
    compose = Pld.compose

    def counted(self: Pld, other: Pld, *rest: Any) -> Pld:
        nonlocal calls
        calls += 1
        return compose(self, other, *rest)

    monkeypatch.setattr(Pld, "compose", counted)
    r = client.post(f"{url}/charges", json={"mechanism": {"mechanism": "laplace", "epsilon": 0.01}})
    assert r.status_code == 201, r.text
    budget = client.get(f"{url}/budget").json()
    assert budget["entries"] == HOLDS + 1 and budget["reserved"]["count"] == 1
    # one composition per expired entry into the ledger, the remaining hold once, the charge
    # (with the holds: two): linear, where it was about HOLDS^2 / 2
    assert calls <= 2 * HOLDS + 10, calls
