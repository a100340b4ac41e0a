"""docker-compose.yml gives the app its database password as PGPASSWORD, not in the URL: libpq
(psycopg) reads it from the environment when the URL has none."""

from __future__ import annotations

import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url

from app.db.engine import Database


@pytest.mark.parametrize("db_url", ["postgres"], indirect=True)
def test_pgpassword_reaches_libpq_through_a_url_without_password(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = make_url(db_url)
    assert url.password is None
    monkeypatch.setenv("PGPASSWORD", "from-the-env-file")
    db = Database(db_url)
    try:
        with db.write_engine.connect() as conn:
            assert conn.execute(text("SELECT 1")).scalar() == 1
            assert conn.connection.dbapi_connection.info.password == "from-the-env-file"  # type: ignore[union-attr]
    finally:
        db.dispose()
