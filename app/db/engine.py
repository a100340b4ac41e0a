"""Engines, sessions and the write transaction that serialises charges.

* PostgreSQL: a writers' engine and a readers' engine (autocommit), each with its own pool, and
  cursors that build ``description`` on use (``app.db.pg_cursor``); the charge path locks the
  dataset's ``dataset_total`` row with ``SELECT ... FOR UPDATE``, which serialises charges of
  one dataset across processes and replicas while other datasets proceed in parallel.
* SQLite: WAL journal, ``synchronous=FULL`` (a commit is on disk before we answer 201), and
  write transactions opened with ``BEGIN IMMEDIATE`` so that the database write lock is taken
  before anything is read. Inside one process, writers queue on a ``threading.Lock`` instead of
  SQLite's busy-wait back-off (which gives a p99 of 0.4-0.6 s with 16 writers, DESIGN.md);
  ``busy_timeout`` still covers writers in other processes.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.orm import Session

from app.db.group_commit import GroupCommit
from app.db.pg_cursor import LazyDescriptionCursor
from app.errors import json_finite

SQLITE_BUSY_TIMEOUT_MS = 30_000


def json_dumps(value: Any) -> str:
    """The JSON stored in JSON columns: standard JSON, an infinite epsilon (a refusal's
    ``requested`` when entry deltas reach the budget's) written as null, as the API answers it.
    Python's default writes ``Infinity``, which PostgreSQL refuses (the refusal then failed:
    a 500 with nothing recorded); SQLite stored it."""
    try:
        return json.dumps(value, allow_nan=False)
    except ValueError:
        return json.dumps(json_finite(value), allow_nan=False)


def own_sqlite_transactions(engine: Engine, begin: str | None) -> None:
    """Take transaction control over from pysqlite (``isolation_level = None``: it opens no
    transaction by itself, and its own opens one only before a row change, so DDL ran outside
    any) and, with ``begin``, start each of the engine's transactions with that statement."""

    @event.listens_for(engine, "connect")
    def _no_pysqlite_transactions(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None

    if begin is not None:

        @event.listens_for(engine, "begin")
        def _on_begin(conn: Any) -> None:
            conn.exec_driver_sql(begin)


def _sqlite_engine(url: str, writer: bool) -> Engine:
    """A SQLite engine: the writer's transactions start with ``BEGIN IMMEDIATE``; the reader's
    statements run in autocommit (pysqlite's ``isolation_level = None``: each SELECT is its own
    read of the last committed state, no BEGIN / COMMIT)."""
    engine = create_engine(
        url,
        connect_args={"check_same_thread": False, "timeout": SQLITE_BUSY_TIMEOUT_MS / 1000},
        pool_size=20,
        max_overflow=40,
        json_serializer=json_dumps,
    )

    own_sqlite_transactions(engine, "BEGIN IMMEDIATE" if writer else None)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        cur = dbapi_connection.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=FULL")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cur.close()

    return engine


def _lazy_descriptions(dbapi_connection: Any, _record: Any) -> None:
    """PostgreSQL: cursors whose ``description`` is built on use (``pg_cursor``)."""
    dbapi_connection.cursor_factory = LazyDescriptionCursor


def core(reader: Session | Connection) -> Connection:
    """The Core connection of a Session (``session.connection()``), or the connection itself:
    for code that only executes Core statements and serves both ``read`` and ``read_core``."""
    return reader if isinstance(reader, Connection) else reader.connection()


class Database:
    """Engine(s) and transaction helpers for one database URL."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.is_sqlite = url.startswith("sqlite")
        if self.is_sqlite:
            self.write_engine = _sqlite_engine(url, writer=True)
            self.read_engine = _sqlite_engine(url, writer=False)
        else:
            # no pre-ping: it costs a round trip per checkout. A connection killed under us
            # fails its request once (503 with Retry-After); SQLAlchemy then invalidates the
            # pool and the next requests reconnect.
            self.write_engine = create_engine(
                url, pool_size=20, max_overflow=20, json_serializer=json_dumps
            )
            # reads run in autocommit (one round trip per SELECT, no BEGIN / COMMIT) on a pool of
            # their own: a connection is put in autocommit once, when it is opened, instead of on
            # every checkout and back on every return (an engine with an isolation-level option
            # over the writers' pool: about 40 us of CPU per read). At most 40 + 40 connections
            # per process; as many as requests run at once are open (docs/operations.md).
            self.read_engine = create_engine(
                url,
                pool_size=10,
                max_overflow=30,
                isolation_level="AUTOCOMMIT",
                json_serializer=json_dumps,
            )
            for engine in (self.write_engine, self.read_engine):
                event.listen(engine, "connect", _lazy_descriptions)
        self._write_lock: threading.Lock | None = threading.Lock() if self.is_sqlite else None
        self.groups = GroupCommit()
        """Group commit of concurrent writes on the same dataset (``admission.run_locked``)."""

    @contextmanager
    def write(self) -> Iterator[Session]:
        """A write transaction: committed when the block exits normally, rolled back otherwise.

        On SQLite it holds the in-process writer lock and the database write lock throughout.
        """
        lock = self._write_lock if self._write_lock is not None else nullcontext()
        with lock, Session(self.write_engine, expire_on_commit=False) as session:
            with session.begin():
                yield session

    @contextmanager
    def read(self) -> Iterator[Session]:
        """A read-only session (objects stay readable after the block) whose statements run in
        autocommit: each SELECT sees what is committed when it runs, with no BEGIN / COMMIT."""
        with Session(self.read_engine, expire_on_commit=False) as session:
            with session.begin():
                yield session

    @contextmanager
    def read_core(self) -> Iterator[Connection]:
        """A read-only Core connection in autocommit, like ``read`` but without an ORM Session
        (about 65 us less CPU per read): for reads that only execute Core statements."""
        with self.read_engine.connect() as conn:
            yield conn

    def dispose(self) -> None:
        """Close every pooled connection."""
        self.write_engine.dispose()
        if self.read_engine.pool is not self.write_engine.pool:
            self.read_engine.dispose()


__all__ = ["Database", "core", "own_sqlite_transactions"]
