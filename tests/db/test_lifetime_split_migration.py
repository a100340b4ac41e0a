"""Migration 0013: ``dataset.lifetime_entry_delta_budget``. A partitioned dataset with a lifetime
budget made before it keeps its filters, spends and admissions (the column is 0: nothing set
aside), on SQLite and PostgreSQL; the downgrade refuses a populated database unless forced.
The test ends at head (the PostgreSQL database is reused)."""

from __future__ import annotations

import pytest
from alembic.util import CommandError
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text

from app.db import migrate
from app.main import create_app
from tests.conftest import ADMIN, make_settings, new_dataset

GAUSS = {"mechanism": "gaussian", "sigma": 5.0}


def _client(url: str) -> TestClient:
    c = TestClient(create_app(make_settings(url)))
    c.headers.update(ADMIN)
    return c


def _columns(url: str) -> set[str]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(text("SELECT * FROM dataset LIMIT 0"))
            return set(rows.keys())
    finally:
        engine.dispose()


def test_a_lifetime_budget_made_before_0013_keeps_its_rule(db_url: str) -> None:
    body = {"mechanism": GAUSS, "blocks": {"from": "2026-11-01", "to": "2026-11-02"}}
    with _client(db_url) as c:
        ds = new_dataset(
            c,
            "daily-before",
            budget={"epsilon": 2.0, "delta": 1e-5},
            partition={"unit": "day"},
            lifetime_budget={"epsilon": 3.0, "delta": 1e-5},
        )
        url = f"/v1/datasets/{ds['id']}"
        assert c.post(f"{url}/charges", json=body).status_code == 201
        before = c.get(url).json()

    with pytest.raises(CommandError):  # a populated database: refused unless forced
        migrate.downgrade(db_url, "0012")
    migrate.downgrade(db_url, "0012", force=True)
    try:
        assert "lifetime_entry_delta_budget" not in _columns(db_url)
    finally:
        migrate.upgrade(db_url)
    assert "lifetime_entry_delta_budget" in _columns(db_url)

    with _client(db_url) as c:
        after = c.get(url).json()
        assert after["lifetime_entry_delta_budget"] == 0.0
        for key in ("spent", "remaining", "lifetime_budget", "filter", "filter_params"):
            assert after[key] == before[key], key
        assert c.post(f"{url}/charges", json=body).status_code == 201
        # an own delta is refused by the blocks (no split), as before 0013
        own = {"mechanism": "approx_dp", "epsilon": 0.1, "delta": 1e-6}
        r = c.post(f"{url}/charges", json={**body, "mechanism": own})
        assert r.status_code == 422, r.text
