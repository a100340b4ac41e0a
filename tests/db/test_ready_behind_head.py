"""A server started without migrating (``PRIVACY_LEDGER_AUTO_MIGRATE=false``, the migration job
not yet run) on a database at an older revision answered ``/readyz`` 200 "ready" while every
request failed on the columns the older schema lacks: a load balancer sent it traffic. Readiness
now says which revision the schema is at and that ``migrate`` is needed; after it, ready."""

from __future__ import annotations

from fastapi.testclient import TestClient

from app.db import migrate
from app.main import create_app
from tests.conftest import ADMIN, make_settings, new_dataset


def test_readyz_is_503_until_an_old_schema_is_migrated(db_url: str) -> None:
    migrate.downgrade(db_url, "0008")  # an empty database: no force needed
    try:
        app = create_app(make_settings(db_url))
        with TestClient(app, raise_server_exceptions=False, headers=ADMIN) as c:
            ready = c.get("/readyz")
            assert ready.status_code == 503, ready.text
            assert "0008" in ready.json()["detail"] and "migrate" in ready.json()["detail"]
            # what readiness stands for: the requests it would be sent do not work yet
            ds = new_dataset(c)
            charge = c.post(
                f"/v1/datasets/{ds['id']}/charges",
                json={"mechanism": {"mechanism": "laplace", "epsilon": 0.1}},
                headers={"Idempotency-Key": "run-1"},
            )
            assert charge.status_code >= 500
    finally:
        migrate.upgrade(db_url)
    with TestClient(create_app(make_settings(db_url))) as c:
        assert c.get("/readyz").status_code == 200
