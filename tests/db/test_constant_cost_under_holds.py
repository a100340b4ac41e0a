"""A charge costs the same with 0, 1 and 1,000 active reservations: it reads the caller's key
and the dataset's totals row, never the holds (their sum lives in the totals row). Work is
counted (rows fetched, statements run), not timed.

SQLite: a counting proxy around the DBAPI connection counts the rows every statement returns.
PostgreSQL: the server's own per-table tuple counters (pg_stat_user_tables), flushed by the
backend that ran the charge.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import StaticPool, create_engine, event, text

from app.accounting.mechanisms import Gaussian, Laplace
from app.db.engine import Database
from app.principal import SYSTEM, Credentials, Role
from app.services import charges, datasets, keys
from app.services.auth import forget_keys
from tests.conftest import reserve_hold

HOLD = Laplace(epsilon=1e-4)
CHARGE = Gaussian(sigma=50.0)


@dataclass
class Counter:
    rows: int = 0
    statements: list[str] = field(default_factory=list)


class _CountingCursor:
    def __init__(self, cursor: sqlite3.Cursor, counter: Counter) -> None:
        self._cursor, self._counter = cursor, counter

    def execute(self, sql: str, *args: Any) -> Any:
        self._counter.statements.append(sql.split(None, 1)[0].upper())
        return self._cursor.execute(sql, *args)

    def fetchone(self) -> Any:
        row = self._cursor.fetchone()
        self._counter.rows += row is not None
        return row

    def fetchmany(self, *args: Any) -> Any:
        rows = self._cursor.fetchmany(*args)
        self._counter.rows += len(rows)
        return rows

    def fetchall(self) -> Any:
        rows = self._cursor.fetchall()
        self._counter.rows += len(rows)
        return rows

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cursor, name)


class _CountingConnection:
    def __init__(self, conn: sqlite3.Connection, counter: Counter) -> None:
        object.__setattr__(self, "_conn", conn)
        object.__setattr__(self, "_counter", counter)

    def cursor(self, *args: Any) -> _CountingCursor:
        return _CountingCursor(self._conn.cursor(*args), self._counter)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._conn, name, value)


def _count_sqlite(db: Database) -> Counter:
    counter = Counter()
    for engine in {db.write_engine, db.read_engine}:

        @event.listens_for(engine, "do_connect")
        def _connect(_dialect: Any, _rec: Any, cargs: Any, cparams: Any) -> Any:
            return _CountingConnection(sqlite3.connect(*cargs, **cparams), counter)

    return counter


def _dataset_with_holds(db: Database, name: str, holds: int) -> str:
    ds = datasets.create_dataset(db, SYSTEM, name=name, budget_epsilon=1e3, budget_delta=1e-6)
    for _ in range(holds):
        reserve_hold(db, ds.id, HOLD)
    return ds.id


_TUPLES = text(
    "SELECT coalesce(sum(seq_tup_read), 0) + coalesce(sum(idx_tup_fetch), 0) "
    "FROM pg_stat_user_tables"
)


def test_a_charge_reads_the_same_rows_with_0_1_and_1000_holds(db_url: str) -> None:
    db = Database(db_url)
    if db.is_sqlite:
        counter = _count_sqlite(db)
    else:
        # one connection for everything, so the backend whose counters we flush is the charge's
        db.dispose()
        db.write_engine = db.read_engine = create_engine(db_url, poolclass=StaticPool)
    observer = create_engine(db_url, poolclass=StaticPool)

    def rows_read() -> int:
        if db.is_sqlite:
            return counter.rows
        with db.write_engine.connect() as c:
            c.execute(text("SELECT pg_stat_force_next_flush()"))
            c.commit()
        with observer.connect() as c:
            c.execute(text("SELECT pg_stat_clear_snapshot()"))
            return int(c.execute(_TUPLES).scalar_one())

    try:
        caller = Credentials(keys.create_key(db, SYSTEM, Role.PIPELINE).key, Role.PIPELINE)
        costs = {}
        for holds in (0, 1, 1000):
            dataset_id = _dataset_with_holds(db, f"holds-{holds}", holds)
            charges.charge(db, caller, dataset_id, mechanism=CHARGE, wire=CHARGE.to_dict())
            forget_keys(db)  # the worst case: the key is looked up (not remembered)
            before = rows_read()
            if db.is_sqlite:
                counter.statements = []
            charges.charge(db, caller, dataset_id, mechanism=CHARGE, wire=CHARGE.to_dict())
            costs[holds] = rows_read() - before
    finally:
        observer.dispose()
        db.dispose()
    assert costs[0] == costs[1] == costs[1000], costs
    if db.is_sqlite:
        # the key, the dataset with its totals, the new entry's id (RETURNING)
        assert costs[1] == 3, counter.statements
        assert counter.statements.count("SELECT") == 2, counter.statements
    else:
        # the key, the dataset, its totals, the time of the last key revocation (one row, read
        # once the lock is held: app.services.state), the foreign-key check of the new entry
        assert costs[1] <= 6, costs
