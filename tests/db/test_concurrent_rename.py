"""Issue 10, item 4: two renames to one name at the same time give one 409, never a 500.

The PATCH checks the name is free, then writes it. On PostgreSQL a concurrent transaction can
take the name between the two (the check cannot see an uncommitted row): the unique index then
refuses the write, which must be answered 409. Made deterministic here: another transaction
renames dataset C to "taken" and holds its commit until the PATCH renaming A to "taken" waits on
it (PostgreSQL shows the wait in pg_locks); then it commits.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor

import httpx
from fastapi.testclient import TestClient
from sqlalchemy import Engine, create_engine, text

from tests.conftest import new_dataset

WAIT_POLLS = 3000  # 10 ms apart: the PATCH reaches its lock wait long before


def _waiting_on_a_lock(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(
            conn.execute(
                text(
                    "SELECT count(*) FROM pg_stat_activity "
                    "WHERE wait_event_type = 'Lock' AND datname = current_database()"
                )
            ).scalar_one()
        )


def test_concurrent_rename_to_the_same_name_is_409(client: TestClient, db_url: str) -> None:
    a, _b, c = (new_dataset(client, n) for n in ("a", "b", "c"))
    engine = create_engine(db_url)
    try:
        with ThreadPoolExecutor(1) as pool:
            with engine.connect() as other:
                other.execute(
                    text("UPDATE dataset SET name = 'taken' WHERE id = :id"), {"id": c["id"]}
                )  # uncommitted: holds 'taken' in the unique index
                patched: Future[httpx.Response] = pool.submit(
                    client.patch, f"/v1/datasets/{a['id']}", json={"name": "taken"}
                )
                if db_url.startswith("postgresql"):
                    for _ in range(WAIT_POLLS):
                        if patched.done() or _waiting_on_a_lock(engine) > 0:
                            break
                        time.sleep(0.01)
                    assert not patched.done(), patched.result().text
                other.commit()
            r = patched.result()
    finally:
        engine.dispose()
    assert r.status_code == 409, r.text
    assert "taken" in r.json()["detail"]
    names = {d["id"]: d["name"] for d in client.get("/v1/datasets").json()["datasets"]}
    assert names[a["id"]] == "a" and names[c["id"]] == "taken"


def test_two_patches_racing_for_one_name(client: TestClient) -> None:
    """Both orders of the race: one rename wins (200), the other is 409."""
    for round_ in range(5):
        x, y = new_dataset(client, f"x{round_}"), new_dataset(client, f"y{round_}")
        barrier = threading.Barrier(2)

        def rename(
            ds: dict, name: str = f"same{round_}", barrier: threading.Barrier = barrier
        ) -> int:
            barrier.wait()
            return client.patch(f"/v1/datasets/{ds['id']}", json={"name": name}).status_code

        with ThreadPoolExecutor(2) as pool:
            codes = sorted(pool.map(rename, (x, y)))
        assert codes == [200, 409]
