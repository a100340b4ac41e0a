"""Several workers or replicas start at once with PRIVACY_LEDGER_ADMIN_KEY set: each ensures
the key; exactly one row results and none of them fails its start-up."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from sqlalchemy import func, select

from app.db.engine import Database
from app.db.models import ApiKey
from app.services import keys

KEY = "race-admin-key-0123456789-abcdefghijklmnop"


def test_concurrent_start_ups_ensure_one_admin_key(db_url: str) -> None:
    dbs = [Database(db_url) for _ in range(8)]  # one engine per "worker", as in separate processes
    barrier = threading.Barrier(len(dbs))

    def start(db: Database) -> str:
        barrier.wait()
        return keys.ensure_admin_key(db, KEY)

    try:
        with ThreadPoolExecutor(len(dbs)) as pool:
            ids = list(pool.map(start, dbs))
        assert len(set(ids)) == 1
        with dbs[0].read() as s:
            assert s.scalar(select(func.count()).select_from(ApiKey)) == 1
    finally:
        for db in dbs:
            db.dispose()
