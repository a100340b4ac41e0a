"""The app's background reservation sweeper (``app.main._sweeper``) and the app's shutdown."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

import app.main
from app.db.engine import Database
from app.main import create_app
from app.services import reservations
from tests.conftest import ADMIN, expire_active_holds, make_settings, new_dataset, run_sql

HANG_GUARD = 120.0  # seconds: only so that a regression fails instead of hanging the suite
DISPOSE_WINDOW = 2.0
"""How long the held sweep waits for the shutdown to dispose the pools under it (which it did
at once, before the fix); the outcome never depends on it, only the time the test takes."""


def test_shutdown_lets_the_sweep_in_progress_return_its_connection_before_disposing(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shutdown cancelled the sweeper's task: a cancelled ``run_in_threadpool`` returns at
    once but leaves its thread running, so ``Database.dispose`` ran while the sweep held a
    connection, which the sweep then handed back to the disposed pool, where it stayed open
    (the suite's flake: a psycopg connection "deleted while still open", collected in some
    later test). A sweep is held with a connection checked out; the pools must have none
    checked out when they are disposed."""
    monkeypatch.setattr(app.main, "SWEEP_INTERVAL_SECONDS", 0.0)  # sweep at once
    sweeping, disposing, swept = threading.Event(), threading.Event(), threading.Event()
    checked_out_at_dispose: list[int] = []

    def held_sweep(db: Database) -> int:
        if sweeping.is_set():  # only the first sweep is held
            return 0
        with db.read_core() as conn:  # a connection checked out, as a real sweep's is
            conn.execute(text("SELECT 1"))
            sweeping.set()
            disposing.wait(DISPOSE_WINDOW)
        swept.set()
        return 0

    real_dispose = Database.dispose

    def observed_dispose(db: Database) -> None:
        pools = (db.write_engine.pool, db.read_engine.pool)
        checked_out_at_dispose.append(sum(p.checkedout() for p in pools))  # type: ignore[attr-defined]
        disposing.set()
        # (before the fix: let the held sweep give its connection back before the real
        # dispose, so that this test leaves nothing open itself)
        assert swept.wait(HANG_GUARD)
        real_dispose(db)

    monkeypatch.setattr(reservations, "sweep_expired", held_sweep)
    monkeypatch.setattr(Database, "dispose", observed_dispose)
    with TestClient(create_app(make_settings(sqlite_url))):
        assert sweeping.wait(HANG_GUARD)  # a sweep is in progress, its connection checked out
    assert checked_out_at_dispose == [0]


def _observe_sweeps(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """An event set once a sweep (``reservations.sweep_expired``) has charged something."""
    charged = threading.Event()
    real_sweep = reservations.sweep_expired

    def observed_sweep(db: Database) -> int:
        n = real_sweep(db)
        if n:
            charged.set()
        return n

    monkeypatch.setattr(reservations, "sweep_expired", observed_sweep)
    return charged


def test_the_background_sweeper_charges_a_due_hold(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The apps of the other tests never sweep by themselves (tests/conftest.py); here the
    sweeper runs at once and often: a hold made due is charged without any request."""
    monkeypatch.setattr(app.main, "SWEEP_INTERVAL_SECONDS", 0.0)
    charged = _observe_sweeps(monkeypatch)
    with TestClient(create_app(make_settings(db_url)), headers=ADMIN) as c:
        ds = new_dataset(c)
        hold = c.post(
            f"/v1/datasets/{ds['id']}/reservations",
            json={"mechanism": {"mechanism": "laplace", "epsilon": 0.25}},
        ).json()
        expire_active_holds(db_url)
        assert charged.wait(HANG_GUARD)
        assert c.get(f"/v1/reservations/{hold['id']}").json()["status"] == "expired"
        entries = c.get(f"/v1/datasets/{ds['id']}/ledger").json()["entries"]
        assert [(e["source"], e["reservation_id"]) for e in entries] == [
            ("reservation_expired", hold["id"])
        ]


def test_the_sweeper_wakes_when_the_earliest_hold_falls_due(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reads showed a due hold as active and uncharged until the next 5-second sweep (an outside
    contract check, stop 32): the sweeper now sleeps only until the earliest hold's expiry. Its
    fixed interval is a day here, so only that wake-up can charge the hold."""
    with TestClient(create_app(make_settings(db_url)), headers=ADMIN) as c:  # no sweeps
        ds = new_dataset(c)
        hold = c.post(
            f"/v1/datasets/{ds['id']}/reservations",
            json={"mechanism": {"mechanism": "laplace", "epsilon": 0.25}, "ttl_seconds": 3600},
        ).json()
    soon = datetime.now(UTC) + timedelta(seconds=0.3)
    run_sql(db_url, "UPDATE reservation SET expires_at = :t", t=soon)
    run_sql(db_url, "UPDATE dataset_total SET held_next_expiry = :t WHERE held_count > 0", t=soon)
    monkeypatch.setattr(app.main, "SWEEP_INTERVAL_SECONDS", 24 * 3600.0)
    monkeypatch.setattr(app.main, "SWEEP_AT_EXPIRY", True)
    charged = _observe_sweeps(monkeypatch)
    with TestClient(create_app(make_settings(db_url)), headers=ADMIN) as c:
        assert charged.wait(HANG_GUARD)
        assert c.get(f"/v1/reservations/{hold['id']}").json()["status"] == "expired"
        assert c.get(f"/v1/datasets/{ds['id']}/budget").json()["entries"] == 1
