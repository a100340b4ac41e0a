"""verify --rebuild while pipelines charge: totals stay equal to the ledger, nothing overspends.

Issue 10, item 1: the rebuild used to sum the ledger in a read transaction and take the lock
only to write, so a charge committed in between was lost from the totals (a reused ``seq``
then answered 500, and the phantom room was admitted). Here a live server takes charges from
8 threads while the rebuild runs over and over, through the API and through the CLI's code
path (straight to the database, another process than the server).
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
from sqlalchemy import create_engine, func, select
from sqlalchemy.orm import Session

from app.accounting.curve import PrivacyCurve
from app.accounting.filters import FilterKind, spend
from app.accounting.mechanisms import mechanism_from_dict
from app.db.engine import Database
from app.db.models import AuditEvent, LedgerEntry
from app.services.verification import verify
from tests.conftest import ADMIN, ADMIN_KEY
from tests.live import running

THREADS = 8
CHARGES_PER_THREAD = 40
EPSILON = 0.05
BUDGET = 3.0  # about 110 of the 320 charges fit: the race straddles the budget
CHARGE = {"mechanism": {"mechanism": "laplace", "epsilon": EPSILON}}


def _ledger(url: str, dataset_id: str) -> tuple[int, float, int]:
    """Rows, spend recomputed from the rows' mechanisms, and 'totals.rebuilt' audit events."""
    engine = create_engine(url)
    try:
        with Session(engine) as s:
            rows = s.scalars(select(LedgerEntry).where(LedgerEntry.dataset_id == dataset_id)).all()
            total = PrivacyCurve.zero()
            for e in rows:
                total = total + mechanism_from_dict(e.mechanism).curve()
            rebuilt = s.scalar(select(func.count()).where(AuditEvent.action == "totals.rebuilt"))
            return len(rows), spend(FilterKind.RDP, total, 1e-6).epsilon, int(rebuilt or 0)
    finally:
        engine.dispose()


def test_rebuild_under_load_keeps_totals_equal_to_the_ledger(db_url: str) -> None:
    with running(db_url, ADMIN_KEY) as server:
        with httpx.Client(base_url=server.url, headers=ADMIN, timeout=60) as c:
            ds = c.post(
                "/v1/datasets",
                json={
                    "name": "busy",
                    "budget": {"epsilon": BUDGET, "delta": 1e-6},
                    "adaptive": False,
                },
            ).json()
        url = f"/v1/datasets/{ds['id']}/charges"
        done = threading.Event()
        reports: list[dict[str, Any]] = []

        def rebuild_forever() -> int:
            db = Database(db_url)
            rounds = 0
            try:
                with httpx.Client(base_url=server.url, headers=ADMIN, timeout=60) as c:
                    while not done.is_set() or rounds < 2:
                        r = c.post("/v1/admin/verify", params={"rebuild": "true"})
                        assert r.status_code == 200, r.text
                        reports.append(r.json())
                        reports.append(
                            verify(db, rebuild=True).model_dump(mode="json")
                        )  # as the CLI
                        rounds += 1
            finally:
                db.dispose()
            return rounds

        def charge(_: int) -> list[int]:
            with httpx.Client(base_url=server.url, headers=ADMIN, timeout=60) as c:
                return [c.post(url, json=CHARGE).status_code for _ in range(CHARGES_PER_THREAD)]

        with ThreadPoolExecutor(THREADS + 1) as pool:
            rebuilder = pool.submit(rebuild_forever)
            answers = [code for codes in pool.map(charge, range(THREADS)) for code in codes]
            done.set()
            rounds = rebuilder.result()

        with httpx.Client(base_url=server.url, headers=ADMIN, timeout=60) as c:
            budget = c.get(f"/v1/datasets/{ds['id']}/budget").json()

    assert rounds >= 2
    assert set(answers) <= {201, 409}, sorted(set(answers))  # no 500 (a reused seq)
    admitted = answers.count(201)
    assert 0 < admitted < len(answers)
    drifted = [d for r in reports for d in r["datasets"] if d["drift"]]
    assert drifted == []  # the rebuild never saw totals that differ from the ledger
    rows, ledger_epsilon, rebuilt_events = _ledger(db_url, ds["id"])
    assert rebuilt_events == 0
    assert rows == admitted == budget["entries"]
    assert ledger_epsilon <= BUDGET and budget["spent"]["epsilon"] <= BUDGET
    db = Database(db_url)
    try:
        assert verify(db).ok is True
    finally:
        db.dispose()
