"""PostgreSQL cursors build ``description`` on use: the same columns as psycopg's, None exactly
when psycopg's is None, and no ``Column`` built for a statement SQLAlchemy has cached."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from sqlalchemy import Integer, String, literal_column, select
from sqlalchemy.engine import make_url

from app.db.engine import Database
from app.db.pg_cursor import LazyDescriptionCursor
from tests.conftest import PG_URL

pytestmark = pytest.mark.skipif(
    not PG_URL, reason="PostgreSQL tests skipped: PRIVACY_LEDGER_TEST_POSTGRES_URL is not set"
)

QUERY = "SELECT 1::int AS a, 'x'::text AS b, 2.5::float8 AS c, now() AS d, '{}'::jsonb AS e"


def _libpq_url() -> str:
    assert PG_URL
    return make_url(PG_URL).set(drivername="postgresql").render_as_string(hide_password=False)


def _described(cur: psycopg.Cursor[Any]) -> list[tuple[Any, ...]] | None:
    d = cur.description
    return None if d is None else [(c.name, c.type_code, c.internal_size) for c in d]


def test_lazy_description_is_psycopgs_own() -> None:
    with psycopg.connect(_libpq_url(), autocommit=True) as conn:
        eager = conn.cursor()
        conn.cursor_factory = LazyDescriptionCursor
        lazy = conn.cursor()
        assert isinstance(lazy, LazyDescriptionCursor)
        for sql in (
            QUERY,
            "SELECT",
            "CREATE TEMP TABLE IF NOT EXISTS t (x int)",
            "INSERT INTO t VALUES (1)",
        ):
            eager.execute(sql)
            lazy.execute(sql)
            assert _described(lazy) == _described(eager), sql
            assert (lazy.description is None) == (eager.description is None), sql
            theirs, ours = eager.description, lazy.description
            if theirs is not None and ours is not None:
                assert bool(ours) == bool(theirs)
                assert [tuple(c) for c in ours] == [tuple(c) for c in theirs]
                assert len(ours) == len(theirs)
        lazy.execute(QUERY)
        assert lazy.description is not None and lazy.description[1].name == "b"
        assert [c.name for c in lazy.description[1:3]] == ["b", "c"]


def test_a_description_read_after_the_cursor_moved_on_is_an_error() -> None:
    with psycopg.connect(_libpq_url(), autocommit=True) as conn:
        conn.cursor_factory = LazyDescriptionCursor
        cur = conn.cursor()
        cur.execute(QUERY)
        old = cur.description
        cur.execute("SELECT 1 AS z")
        assert old is not None
        with pytest.raises(RuntimeError, match="moved on"):
            list(old)


def test_the_service_engines_use_it_and_a_cached_statement_builds_no_column(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert PG_URL
    db = Database(PG_URL)
    built = 0
    real = psycopg.Column

    def counting(cursor: Any, index: int) -> Any:
        nonlocal built
        built += 1
        return real(cursor, index)

    monkeypatch.setattr("app.db.pg_cursor.Column", counting)
    stmt = select(literal_column("1", Integer).label("a"), literal_column("'x'", String).label("b"))
    try:
        for engine in (db.write_engine, db.read_engine):
            with engine.connect() as conn:
                assert isinstance(conn.connection.dbapi_connection, psycopg.Connection)
                assert conn.connection.dbapi_connection.cursor_factory is LazyDescriptionCursor
        with db.read_core() as conn:
            assert conn.execute(stmt).one() == (1, "x")  # SQLAlchemy reads the columns once
            first = built
            for _ in range(5):
                assert conn.execute(stmt).one()._mapping["b"] == "x"
        assert first == 2  # two columns, read when SQLAlchemy first saw the statement
        assert built == first  # then cached: no description built
    finally:
        db.dispose()
