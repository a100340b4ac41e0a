"""An active key is looked up once per process and window (``auth.KEY_CACHE_SECONDS``);
revoking it through the process forgets it at once; unknown keys are never remembered.
Work is counted (statements run), not timed."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import event

from app.db.engine import Database
from app.errors import Unauthorized
from app.principal import Credentials, Role
from app.services import auth
from app.services.auth import KEY_CACHE_SECONDS, authenticated


@contextmanager
def counted(db: Database) -> Iterator[list[str]]:
    seen: list[str] = []

    def on_execute(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        seen.append(statement)

    # PostgreSQL's read engine is the write engine with other options: same events
    engines = [db.write_engine]
    if db.read_engine.pool is not db.write_engine.pool:
        engines.append(db.read_engine)
    for e in engines:
        event.listen(e, "before_cursor_execute", on_execute)
    try:
        yield seen
    finally:
        for e in engines:
            event.remove(e, "before_cursor_execute", on_execute)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The window's clock, fixed until a test moves it: nothing here depends on timing."""
    now = [1000.0]
    monkeypatch.setattr(auth, "_now", lambda: now[0])
    return now


def test_active_key_is_remembered_for_the_window(client: TestClient, clock: list[float]) -> None:
    db: Database = client.app.state.db  # type: ignore[attr-defined]
    k = client.post("/v1/keys", json={"role": "viewer"}).json()
    caller = Credentials(token=k["key"], role=Role.VIEWER)
    with counted(db) as first:
        authenticated(db, caller)
    clock[0] += KEY_CACHE_SECONDS
    with counted(db) as within:
        authenticated(db, caller)
    clock[0] += 0.001
    with counted(db) as after:
        authenticated(db, caller)
    assert (len(first), len(within), len(after)) == (1, 0, 1)


def test_active_key_is_remembered_and_forgotten_on_revoke(
    client: TestClient, clock: list[float]
) -> None:
    db: Database = client.app.state.db  # type: ignore[attr-defined]
    k = client.post("/v1/keys", json={"role": "viewer"}).json()
    caller = Credentials(token=k["key"], role=Role.VIEWER)
    with counted(db) as first:
        principal = authenticated(db, caller)
    assert principal.key_id == k["id"] and len(first) == 1
    with counted(db) as again:
        assert authenticated(db, caller) == principal
    assert again == []  # remembered: no query
    assert client.delete(f"/v1/keys/{k['id']}").json()["revoked"] is True
    with counted(db) as after, pytest.raises(Unauthorized, match="revoked"):
        authenticated(db, caller)
    assert len(after) == 1  # forgotten at once: looked up again, found revoked
    with counted(db) as still, pytest.raises(Unauthorized, match="revoked"):
        authenticated(db, caller)
    assert len(still) == 1  # a revoked key is never remembered


def test_unknown_key_is_never_remembered(client: TestClient) -> None:
    db: Database = client.app.state.db  # type: ignore[attr-defined]
    caller = Credentials(token="pl_a_" + "x" * 40, role=Role.VIEWER)
    lookups = []
    for _ in range(2):
        with counted(db) as seen, pytest.raises(Unauthorized, match="unknown"):
            authenticated(db, caller)
        lookups.append(len(seen))
    assert lookups[0] > 0 and lookups[1] == lookups[0]  # looked up again: not remembered
