"""Cost of authenticating one request (``app.services.keys.authenticate``), printed as JSON.

Steady state: the same key presented again and again (what every request of a pipeline does).
It is measured against the scheme it replaced (one unsalted SHA-256 lookup, then a salted
SHA-256 compared in constant time; reproduced here on a row stored that way), in alternating
blocks in one process against one database, so that a loaded machine moves both alike.
First use: a key this process has not seen pays one scrypt.

    python bench/auth.py [--calls 2000] [--blocks 10] [--database-url URL]
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import secrets
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from sqlalchemy import select, text

from app.db import migrate
from app.db.engine import Database
from app.db.models import ApiKey
from app.principal import SYSTEM, Credentials, Role
from app.services import keys
from app.services.auth import authenticated


def replaced_scheme(db: Database, key: str) -> str:
    """The authentication this change replaced (unsalted SHA-256 lookup + salted hash)."""
    lookup = hashlib.sha256(key.encode()).hexdigest()
    with db.read() as s:
        row = s.scalars(select(ApiKey).where(ApiKey.lookup == lookup)).first()
        assert row is not None and row.salt is not None and row.key_hash is not None
        expected = hashlib.sha256((row.salt + key).encode()).hexdigest()
        assert hmac.compare_digest(row.key_hash, expected)
        return row.id


def _legacy_key(db: Database) -> str:
    key = "pl_p_" + secrets.token_urlsafe(32)
    salt = secrets.token_hex(16)
    with db.write() as s:
        s.execute(
            text(
                "INSERT INTO api_key (id, lookup, salt, key_hash, role, dataset_ids, created_at) "
                "VALUES (:id, :lookup, :salt, :hash, 'pipeline', 'null', CURRENT_TIMESTAMP)"
            ),
            {
                "id": "key_" + secrets.token_hex(8),
                "lookup": hashlib.sha256(key.encode()).hexdigest(),
                "salt": salt,
                "hash": hashlib.sha256((salt + key).encode()).hexdigest(),
            },
        )
    return key


def _block(fn: Callable[[], object], calls: int) -> float:
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t0) / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--blocks", type=int, default=10)
    parser.add_argument("--database-url")
    args = parser.parse_args()
    url = args.database_url or f"sqlite:///{Path(tempfile.mkdtemp()) / 'auth.db'}"
    migrate.upgrade(url)
    db = Database(url)
    try:
        first_use = []
        for _ in range(5):
            key = keys.create_key(db, SYSTEM, Role.PIPELINE).key
            fresh = Database(url)  # nothing remembered for this key yet
            t0 = time.perf_counter()
            authenticated(fresh, Credentials(key, Role.VIEWER))
            first_use.append(time.perf_counter() - t0)
            fresh.dispose()
        ours_key = keys.create_key(db, SYSTEM, Role.PIPELINE).key
        old_key = _legacy_key(db)
        authenticated(db, Credentials(ours_key, Role.VIEWER))
        replaced_scheme(db, old_key)
        ours: list[float] = []
        old: list[float] = []
        for i in range(args.blocks):  # A B, B A, A B, ...: neither always runs first
            pair: list[tuple[list[float], Callable[[], object]]] = [
                (ours, lambda: authenticated(db, Credentials(ours_key, Role.VIEWER))),
                (old, lambda: replaced_scheme(db, old_key)),
            ]
            for out, fn in pair if i % 2 == 0 else reversed(pair):
                out.append(_block(fn, args.calls))
    finally:
        db.dispose()
    ratios = [a / b for a, b in zip(ours, old, strict=True)]
    print(
        json.dumps(
            {
                "database": "sqlite" if url.startswith("sqlite") else "postgresql",
                "calls_per_block": args.calls,
                "blocks": args.blocks,
                "steady_state_us_median": round(statistics.median(ours) * 1e6, 1),
                "replaced_scheme_us_median": round(statistics.median(old) * 1e6, 1),
                "ratio_median": round(statistics.median(ratios), 3),
                "first_use_ms_median": round(statistics.median(first_use) * 1e3, 1),
            }
        )
    )


if __name__ == "__main__":
    main()
