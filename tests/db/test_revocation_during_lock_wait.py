"""PostgreSQL: a write waiting for a dataset's lock when its key is revoked writes nothing.

The first fix (stop 32) read the time of the last revocation inside the lock statement; a
statement that waits for a row lock still reads everything else as of its start, so a
revocation committed during the wait went unseen and the charge committed (found by a review on
two replicas). The setting is now read in a statement of its own once the lock is held. SQLite
has no such wait: its write lock is taken before any statement (and a revocation waits for it).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient
from sqlalchemy.engine import make_url

from app.accounting.mechanisms import Gaussian
from app.errors import ProblemError
from app.main import create_app
from app.principal import SYSTEM, Credentials, Role
from app.services import charges, keys
from tests.conftest import ADMIN, make_settings, new_dataset, run_sql

HANG_GUARD = 120.0  # seconds: only so that a regression fails instead of hanging the suite


def _libpq(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def _wait_until_blocked(blocker: psycopg.Connection[Any]) -> None:
    """Until another backend waits for a lock (the charge, on the dataset's row)."""
    deadline = time.monotonic() + HANG_GUARD
    while time.monotonic() < deadline:
        waiting = blocker.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
            "AND datname = current_database()"
        ).fetchone()
        if waiting is not None and waiting[0] > 0:
            return
        time.sleep(0.01)
    raise AssertionError("the charge never waited for the dataset's lock")


@pytest.mark.parametrize("db_url", ["postgres"], indirect=True)
def test_a_charge_waiting_for_the_lock_when_its_key_is_revoked_writes_nothing(
    db_url: str,
) -> None:
    with TestClient(create_app(make_settings(db_url)), headers=ADMIN) as c:
        db = c.app.state.db  # type: ignore[attr-defined]
        ds = new_dataset(c, "alpha", budget={"epsilon": 10.0, "delta": 1e-6})
        pipe = c.post("/v1/keys", json={"role": "pipeline"}).json()
        # a revocation long ago only: the charge's key is read, and trusted, before the wait
        doomed = c.post("/v1/keys", json={"role": "viewer"}).json()
        assert c.delete(f"/v1/keys/{doomed['id']}").status_code == 200
        run_sql(
            db_url,
            "UPDATE app_setting SET value = '2020-01-01T00:00:00+00:00' "
            "WHERE key = 'keys_revoked_at'",
        )
        gauss = Gaussian(sigma=5.0)
        outcome: dict[str, Any] = {}

        def charge() -> None:
            try:
                outcome["answer"] = charges.charge(
                    db,
                    Credentials(pipe["key"], Role.PIPELINE),
                    ds["id"],
                    mechanism=gauss,
                    wire=gauss.to_dict(),
                )
            except ProblemError as exc:
                outcome["status"] = exc.status

        with (
            psycopg.connect(_libpq(db_url)) as holder,
            psycopg.connect(_libpq(db_url), autocommit=True) as watcher,
        ):
            holder.execute(
                "SELECT 1 FROM dataset_total WHERE dataset_id = %s FOR UPDATE", [ds["id"]]
            )
            worker = threading.Thread(target=charge)
            worker.start()
            _wait_until_blocked(watcher)
            keys.revoke_key(db, SYSTEM, pipe["id"])  # commits while the charge waits
            holder.rollback()  # the lock goes; the charge goes on
            worker.join(HANG_GUARD)
        assert outcome == {"status": 401}
        assert c.get(f"/v1/datasets/{ds['id']}/budget").json()["entries"] == 0
