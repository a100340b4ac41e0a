"""Invariant 1: under any concurrency, across processes, committed spend stays within budget."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from app.accounting.curve import PrivacyCurve
from app.accounting.filters import Budget, Filter, FilterKind
from app.accounting.mechanisms import Laplace, mechanism_from_dict
from app.db.engine import Database
from app.db.models import LedgerEntry
from app.errors import BudgetExceeded
from app.principal import SYSTEM
from app.services import charges, datasets
from app.services.verification import verify
from tests.conftest import ADMIN, ADMIN_KEY, PG_URL
from tests.live import running

THREADS = 32


def _ledger_spend(url: str, dataset_id: str, f: Filter, delta: float) -> tuple[int, float]:
    """Spend under filter ``f`` recomputed from the ledger rows' mechanisms (independently of
    the totals row)."""
    engine = create_engine(url)
    try:
        with Session(engine) as s:
            rows = s.scalars(select(LedgerEntry).where(LedgerEntry.dataset_id == dataset_id)).all()
            total = PrivacyCurve.zero()
            for e in rows:
                total = total + mechanism_from_dict(e.mechanism).curve()
            return len(rows), f.spend_at(total, delta).epsilon
    finally:
        engine.dispose()


@pytest.mark.parametrize("accounting,adaptive", [("rdp", False), ("zcdp", True), ("rdp", True)])
def test_threads_race_through_the_service(db_url: str, accounting: str, adaptive: bool) -> None:
    db = Database(db_url)
    try:
        ds = datasets.create_dataset(
            db,
            SYSTEM,
            name="race",
            budget_epsilon=1.0,
            budget_delta=1e-6,
            accounting=accounting,
            adaptive=adaptive,
        )
        mech = Laplace(epsilon=0.07)
        barrier = threading.Barrier(THREADS)

        def one(_: int) -> int:
            barrier.wait()
            try:
                charges.charge(db, SYSTEM, ds.id, mechanism=mech, wire=mech.to_dict())
                return 201
            except BudgetExceeded:
                return 409

        with ThreadPoolExecutor(THREADS) as pool:
            answers = list(pool.map(one, range(THREADS)))
        admitted = answers.count(201)
        assert admitted + answers.count(409) == THREADS
        assert 0 < admitted < THREADS  # the race straddles the budget
        # the filter rebuilt from the dataset's recorded kind and orders (thresholds recomputed)
        f = Filter.create(
            FilterKind(ds.filter),
            Budget(1.0, 1e-6),
            ds.allowed_mechanisms,
            orders=(ds.filter_params or {}).get("orders"),
        )
        n_rows, eps = _ledger_spend(db_url, ds.id, f, 1e-6)
        assert n_rows == admitted
        assert eps <= 1.0
        assert datasets.get_dataset(db, SYSTEM, ds.id).spent.epsilon <= 1.0
        assert verify(db).ok
    finally:
        db.dispose()


def _race_over_http(urls: list[str], dataset_id: str) -> list[int]:
    barrier = threading.Barrier(THREADS)

    def one(i: int) -> int:
        with httpx.Client(base_url=urls[i % len(urls)], headers=ADMIN, timeout=60) as c:
            barrier.wait()
            r = c.post(
                f"/v1/datasets/{dataset_id}/charges",
                json={"mechanism": {"mechanism": "gaussian", "sigma": 3.0}},
            )
            return r.status_code

    with ThreadPoolExecutor(THREADS) as pool:
        return list(pool.map(one, range(THREADS)))


def _check_http_race(url: str, servers_urls: list[str]) -> None:
    with httpx.Client(base_url=servers_urls[0], headers=ADMIN, timeout=30) as c:
        ds = c.post(
            "/v1/datasets",
            json={
                "name": "race-http",
                "budget": {"epsilon": 3.0, "delta": 1e-6},
                "adaptive": False,
            },
        ).json()
    answers = _race_over_http(servers_urls, ds["id"])
    assert set(answers) <= {201, 409}, answers
    admitted = answers.count(201)
    assert 0 < admitted < THREADS
    n_rows, eps = _ledger_spend(
        url, ds["id"], Filter.create(FilterKind.RDP, Budget(3.0, 1e-6)), 1e-6
    )
    assert n_rows == admitted
    assert eps <= 3.0
    db = Database(url)
    try:
        assert verify(db).ok
    finally:
        db.dispose()


@pytest.mark.slow
def test_two_worker_processes_on_postgres() -> None:
    if not PG_URL:
        reason = "PostgreSQL tests skipped: PRIVACY_LEDGER_TEST_POSTGRES_URL is not set"
        print(reason)
        pytest.skip(reason)
    from tests.conftest import _reset_postgres

    _reset_postgres(PG_URL)
    with running(PG_URL, ADMIN_KEY, workers=2) as server:
        _check_http_race(PG_URL, [server.url])


@pytest.mark.slow
def test_two_replicas_share_postgres() -> None:
    """Two separate servers (replicas) on one PostgreSQL database."""
    if not PG_URL:
        reason = "PostgreSQL tests skipped: PRIVACY_LEDGER_TEST_POSTGRES_URL is not set"
        print(reason)
        pytest.skip(reason)
    from tests.conftest import _reset_postgres

    _reset_postgres(PG_URL)
    with running(PG_URL, ADMIN_KEY) as a, running(PG_URL, ADMIN_KEY) as b:
        _check_http_race(PG_URL, [a.url, b.url])


@pytest.mark.slow
def test_two_server_processes_share_one_sqlite_file(sqlite_url: str) -> None:
    """SQLite across processes: BEGIN IMMEDIATE + busy_timeout serialise the writers."""
    with running(sqlite_url, ADMIN_KEY) as a, running(sqlite_url, ADMIN_KEY) as b:
        _check_http_race(sqlite_url, [a.url, b.url])
