"""Budget structures under races and at scale (issue 15).

* Never overspend an allocation, a dataset, a block or a lifetime budget, under charges racing
  across 2 server processes (SQLite: one file; PostgreSQL: one database), including charges
  whose block ranges overlap. Checked against the ledger rows, recomposed independently.
* A charge touching 31 blocks reads O(31) rows and runs as many statements as a charge touching
  one block, whatever the ledger's length (work counted, not timed).
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import date, timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import StaticPool, create_engine, event, select, text
from sqlalchemy.orm import Session

from app.accounting.curve import PrivacyCurve
from app.accounting.filters import Budget, Filter, FilterKind
from app.accounting.mechanisms import Laplace, mechanism_from_dict
from app.db.engine import Database
from app.db.models import Allocation, LedgerEntry
from app.principal import SYSTEM
from app.services import allocations, charges, datasets
from app.services.verification import verify
from tests.conftest import ADMIN, ADMIN_KEY
from tests.db.test_constant_cost_under_holds import _TUPLES, _count_sqlite
from tests.live import running

THREADS = 32
RANGES = [(1, 3), (2, 5), (3, 7), (5, 7), (1, 7), (4, 4)]


def _day(n: int) -> str:
    return f"2026-11-{n:02d}"


def _ledger(url: str, dataset_id: str) -> tuple[list[Any], dict[str, str]]:
    engine = create_engine(url)
    try:
        with Session(engine) as s:
            rows = s.scalars(select(LedgerEntry).where(LedgerEntry.dataset_id == dataset_id)).all()
            names = {
                row.id: row.name
                for row in s.execute(
                    select(Allocation.id, Allocation.name).where(
                        Allocation.dataset_id == dataset_id
                    )
                )
            }
            return [
                (
                    e.allocation_id,
                    e.block_from,
                    e.block_to,
                    mechanism_from_dict(e.mechanism).curve(),
                )
                for e in rows
            ], names
    finally:
        engine.dispose()


def _spend(total: PrivacyCurve, eps: float) -> float:
    return Filter.create(FilterKind.RDP, Budget(eps, 1e-6)).spend(total).epsilon


def _race(urls: list[str], jobs: list[tuple[str, dict[str, Any]]]) -> list[int]:
    barrier = threading.Barrier(len(jobs))

    def one(i: int) -> int:
        path, body = jobs[i]
        with httpx.Client(base_url=urls[i % len(urls)], headers=ADMIN, timeout=120) as c:
            barrier.wait()
            return c.post(path, json=body).status_code

    with ThreadPoolExecutor(len(jobs)) as pool:
        return list(pool.map(one, range(len(jobs))))


def _check_race(url: str, urls: list[str]) -> None:
    with httpx.Client(base_url=urls[0], headers=ADMIN, timeout=60) as c:
        part = c.post(
            "/v1/datasets",
            json={
                "name": "race-blocks",
                "budget": {"epsilon": 1.0, "delta": 1e-6},
                "adaptive": False,
                "partition": {"unit": "day"},
                "lifetime_budget": {"epsilon": 2.0, "delta": 1e-6},
            },
        ).json()
        plain = c.post(
            "/v1/datasets",
            json={
                "name": "race-alloc",
                "budget": {"epsilon": 1.0, "delta": 1e-6},
                "adaptive": False,
            },
        ).json()
        for ds, eps in ((part, 0.7), (plain, 0.6)):
            for team in ("team-a", "team-b"):  # overbooked: 2 x eps > ... per block / dataset
                r = c.post(
                    f"/v1/datasets/{ds['id']}/allocations",
                    json={"name": team, "budget": {"epsilon": eps, "delta": 1e-6}},
                )
                assert r.status_code == 201, r.text
    mech = {"mechanism": "laplace", "epsilon": 0.15}
    jobs: list[tuple[str, dict[str, Any]]] = []
    for i in range(THREADS):
        team = "team-a" if i % 2 else "team-b"
        if i % 4 == 3:
            jobs.append(
                (f"/v1/datasets/{plain['id']}/charges", {"mechanism": mech, "allocation": team})
            )
        else:
            a, b = RANGES[i % len(RANGES)]
            body: dict[str, Any] = {"mechanism": mech, "blocks": {"from": _day(a), "to": _day(b)}}
            if i % 3:
                body["allocation"] = team
            jobs.append((f"/v1/datasets/{part['id']}/charges", body))
    jobs = jobs + jobs  # two rounds' worth, all racing: enough to straddle every limit
    answers = _race(urls, jobs)
    assert set(answers) <= {201, 409}, answers
    assert 0 < answers.count(201) < len(jobs)

    # partitioned: every block within 1.0, each team's share of each block within 0.7, the
    # composition of everything within the lifetime 2.0
    entries, names = _ledger(url, part["id"])
    per_block: dict[str, PrivacyCurve] = {}
    per_share: dict[tuple[str, str], PrivacyCurve] = {}
    everything = PrivacyCurve.zero()
    for allocation_id, first, last, curve in entries:
        everything = everything + curve
        d, end = date.fromisoformat(first), date.fromisoformat(last)
        while d <= end:
            k = d.isoformat()
            per_block[k] = per_block.get(k, PrivacyCurve.zero()) + curve
            if allocation_id is not None:
                share = (names[allocation_id], k)
                per_share[share] = per_share.get(share, PrivacyCurve.zero()) + curve
            d += timedelta(days=1)
    assert per_block and per_share
    assert all(_spend(t, 1.0) <= 1.0 for t in per_block.values())
    assert all(_spend(t, 0.7) <= 0.7 for t in per_share.values())
    assert _spend(everything, 2.0) <= 2.0

    # unpartitioned: each allocation within 0.6 and the dataset within 1.0
    entries, names = _ledger(url, plain["id"])
    per_team: dict[str, PrivacyCurve] = {}
    total = PrivacyCurve.zero()
    for allocation_id, _, _, curve in entries:
        total = total + curve
        per_team[names[allocation_id]] = (
            per_team.get(names[allocation_id], PrivacyCurve.zero()) + curve
        )
    assert _spend(total, 1.0) <= 1.0
    assert all(_spend(t, 0.6) <= 0.6 for t in per_team.values())
    db = Database(url)
    try:
        assert verify(db).ok
    finally:
        db.dispose()


@pytest.mark.slow
def test_two_processes_race_on_allocations_and_blocks(db_url: str) -> None:
    """Two server processes on one database (a SQLite file, or PostgreSQL)."""
    with running(db_url, ADMIN_KEY) as a, running(db_url, ADMIN_KEY) as b:
        _check_race(db_url, [a.url, b.url])


# --- O(31): a charge touching 31 blocks ---------------------------------------------------------

TINY = Laplace(epsilon=1e-4)


def test_a_charge_over_31_blocks_reads_o31_rows(db_url: str) -> None:
    db = Database(db_url)
    if db.is_sqlite:
        counter = _count_sqlite(db)
    else:
        db.dispose()
        db.write_engine = db.read_engine = create_engine(db_url, poolclass=StaticPool)
    observer = create_engine(db_url, poolclass=StaticPool)
    statements: list[str] = []  # one per execute or executemany, on either backend

    @event.listens_for(db.write_engine, "before_cursor_execute")
    def _count(_c: Any, _cur: Any, sql: str, *_: Any) -> None:
        statements.append(sql.split(None, 1)[0].upper())

    def rows_read() -> int:
        if db.is_sqlite:
            return counter.rows
        with db.write_engine.connect() as c:
            c.execute(text("SELECT pg_stat_force_next_flush()"))
            c.commit()
        with observer.connect() as c:
            c.execute(text("SELECT pg_stat_clear_snapshot()"))
            return int(c.execute(_TUPLES).scalar_one())

    def charge(ds: str, first: str, last: str) -> tuple[int, int]:
        before = rows_read()
        statements.clear()
        charges.charge(
            db,
            SYSTEM,
            ds,
            mechanism=TINY,
            wire=TINY.to_dict(),
            allocation="team-a",
            blocks=(first, last),
        )
        n = len(statements)
        return rows_read() - before, n

    try:
        costs: dict[tuple[int, int], tuple[int, int]] = {}
        for ledger_size in (0, 300):
            ds = datasets.create_dataset(
                db,
                SYSTEM,
                name=f"cost-{ledger_size}",
                budget_epsilon=10.0,
                budget_delta=1e-6,
                partition_unit="day",
            ).id
            allocations.create_allocation(db, SYSTEM, ds, name="team-a", epsilon=10.0, delta=1e-6)
            for i in range(ledger_size):  # a long ledger on other blocks (one 31-day range)
                day = (date(2025, 1, 1) + timedelta(days=i % 300)).isoformat()
                charges.charge(
                    db,
                    SYSTEM,
                    ds,
                    mechanism=TINY,
                    wire=TINY.to_dict(),
                    allocation="team-a",
                    blocks=(day, day),
                )
            for span in (1, 31):
                last = (date(2026, 1, 1) + timedelta(days=span - 1)).isoformat()
                charge(ds, "2026-01-01", last)  # creates the blocks' rows
                costs[(ledger_size, span)] = charge(ds, "2026-01-01", last)
    finally:
        observer.dispose()
        db.dispose()
    for ledger_size in (0, 300):
        one, many = costs[(ledger_size, 1)][0], costs[(ledger_size, 31)][0]
        # the dataset's block and the allocation's share of it: two rows per extra block read
        # (SQLite); PostgreSQL's counters also count each UPDATE's index fetch of those rows
        per_block = 2 if db.is_sqlite else 4
        assert many - one == per_block * 30, costs
    # independent of the ledger's length
    assert costs[(0, 31)][0] == costs[(300, 31)][0], costs
    # as many statements for 31 blocks as for one (one UPDATE per table, many parameter sets)
    assert costs[(0, 1)][1] == costs[(0, 31)][1] == costs[(300, 31)][1], costs
