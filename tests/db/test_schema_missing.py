"""A database re-created empty (or downgraded to nothing) under a running server: reads answered
500 and ``/readyz`` said only "ProgrammingError" (stop 32 operations audit). Now every request
answers 503 naming ``privacy-ledger migrate``, and ``/readyz`` names the missing revision. Each
test ends at head again (the PostgreSQL database is reused by later tests)."""

from __future__ import annotations

from fastapi.testclient import TestClient

from app.db import migrate
from app.main import create_app
from tests.conftest import ADMIN, make_settings, new_dataset


def test_a_database_without_schema_answers_503_naming_migrate(db_url: str) -> None:
    with TestClient(create_app(make_settings(db_url)), headers=ADMIN) as c:
        ds = new_dataset(c)
        assert c.get("/readyz").status_code == 200
        migrate.downgrade(db_url, "base", force=True)  # every table gone
        try:
            ready = c.get("/readyz")
            assert ready.status_code == 503
            assert "revision none" in ready.json()["detail"]
            assert "privacy-ledger migrate" in ready.json()["detail"]
            for r in (
                c.get(f"/v1/datasets/{ds['id']}/budget"),
                c.get("/v1/datasets"),
                c.post(
                    f"/v1/datasets/{ds['id']}/charges",
                    json={"mechanism": {"mechanism": "laplace", "epsilon": 0.1}},
                ),
            ):
                assert r.status_code == 503, r.text
                assert "privacy-ledger migrate" in r.json()["detail"], r.text
        finally:
            migrate.upgrade(db_url)
