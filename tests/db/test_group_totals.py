"""Charges grouped into one transaction (``app.db.group_commit``) write the dataset's totals row
once for the group, not once per charge, and the totals they leave are the ledger's (verify).
Grouping is arranged by holding the dataset's group open and counting the queued charges,
never by timing; the writes are counted from the statements sent."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from sqlalchemy import event
from sqlalchemy.orm import Session

from app.accounting.mechanisms import Gaussian
from app.db.engine import Database
from app.principal import SYSTEM, Credentials, Role
from app.services import admission, charges, datasets, keys, ledger
from app.services.state import DatasetState

CHARGE = Gaussian(sigma=50.0)
QUEUED = 6


def test_a_group_of_charges_writes_the_totals_once(db_url: str) -> None:
    db = Database(db_url)
    sent: list[str] = []

    @event.listens_for(db.write_engine, "before_cursor_execute")
    def _sent(_c: Any, _cur: Any, sql: str, *_a: Any) -> None:
        sent.append(" ".join(sql.split()).upper())

    try:
        ds = datasets.create_dataset(
            db, SYSTEM, name="grouped", budget_epsilon=1e3, budget_delta=1e-6
        )
        caller = Credentials(keys.create_key(db, SYSTEM, Role.PIPELINE).key, Role.PIPELINE)
        charges.charge(db, caller, ds.id, mechanism=CHARGE, wire=CHARGE.to_dict())  # warm
        inside, proceed = threading.Event(), threading.Event()

        def hold_the_group_open(_s: Session, _st: DatasetState) -> None:
            inside.set()
            proceed.wait()

        with ThreadPoolExecutor(QUEUED + 1) as pool:
            first = pool.submit(admission.run_locked, db, ds.id, SYSTEM, hold_the_group_open)
            assert inside.wait(60)
            queued = [
                pool.submit(
                    charges.charge, db, caller, ds.id, mechanism=CHARGE, wire=CHARGE.to_dict()
                )
                for _ in range(QUEUED)
            ]
            while True:  # every charge queued behind the open group before it may finish
                with db.groups._mutex:
                    if len(db.groups._queues[("dataset", ds.id)]) == QUEUED:
                        break
                threading.Event().wait(0.001)
            sent.clear()
            proceed.set()
            first.result()
            seqs = sorted(f.result().entry.seq for f in queued)
        assert seqs == list(range(2, QUEUED + 2))
        totals_writes = [
            s for s in sent if s.startswith("UPDATE DATASET_TOTAL") or "SAVED_TOTALS" in s
        ]
        entries = [s for s in sent if "INSERT INTO LEDGER_ENTRY" in s]
        assert len(entries) == QUEUED, sent
        assert len(totals_writes) == 1, totals_writes
        report = ledger.verify(db, SYSTEM)
        assert report.ok, report
        assert datasets.budget_view(db, SYSTEM, ds.id).entries == QUEUED + 1
    finally:
        db.dispose()
