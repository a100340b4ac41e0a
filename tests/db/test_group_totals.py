"""Charges grouped into one transaction (``app.db.group_commit``) write the dataset's totals row
once for the group, not once per charge (on PostgreSQL their entries too, in one statement),
and the ledger and totals they leave are consistent (verify).
Grouping is arranged by holding the dataset's group open and counting the queued charges,
never by timing; the writes are counted from the statements sent."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from sqlalchemy import event, select
from sqlalchemy.orm import Session

from app.accounting.mechanisms import Gaussian
from app.db.engine import Database
from app.db.models import LedgerEntry
from app.principal import SYSTEM, Credentials, Role
from app.services import admission, charges, datasets, keys, verification
from app.services.state import DatasetState

CHARGE = Gaussian(sigma=50.0)
QUEUED = 6


def _run_as_one_group(
    db: Database,
    dataset_id: str,
    calls: list[Callable[[], Any]],
    queued: Callable[[], None] = lambda: None,
) -> list[Any]:
    """Run ``calls`` (each one unit on the dataset) as one group: queued behind a group held
    open until all of them wait (counted, never timed; then ``queued()`` is called). Their
    answers, in order."""
    inside, proceed = threading.Event(), threading.Event()

    def hold_the_group_open(_s: Session, _st: DatasetState) -> None:
        inside.set()
        proceed.wait()

    with ThreadPoolExecutor(len(calls) + 1) as pool:
        try:
            first = pool.submit(admission.run_locked, db, dataset_id, SYSTEM, hold_the_group_open)
            assert inside.wait(60)
            futures = [pool.submit(call) for call in calls]
            while True:  # every call queued behind the open group before it may finish
                with db.groups._mutex:
                    if len(db.groups._queues[("dataset", dataset_id)]) == len(calls):
                        break
                if done := [f for f in futures if f.done()]:  # an error, not a hang
                    done[0].result()  # (a call that failed before queueing raises here)
                    raise AssertionError("a call finished without queueing behind the group")
                threading.Event().wait(0.001)
            queued()
        finally:
            proceed.set()  # never leave the open group (and the pool's threads) waiting
        first.result()
        return [f.result() for f in futures]


def _stored_ids(db: Database, dataset_id: str) -> dict[int, int]:
    with db.read() as s:
        rows = s.execute(
            select(LedgerEntry.seq, LedgerEntry.id).where(LedgerEntry.dataset_id == dataset_id)
        ).all()
    return {int(seq): int(i) for seq, i in rows}


def test_a_group_of_charges_writes_the_totals_once(db_url: str) -> None:
    db = Database(db_url)
    sent: list[str] = []
    rows: list[int] = []  # the parameter sets of each statement (executemany: several)

    @event.listens_for(db.write_engine, "before_cursor_execute")
    def _sent(_c: Any, _cur: Any, sql: str, params: Any, _ctx: Any, many: bool) -> None:
        sent.append(" ".join(sql.split()).upper())
        rows.append(len(params) if many else 1)

    try:
        ds = datasets.create_dataset(
            db, SYSTEM, name="grouped", budget_epsilon=1e3, budget_delta=1e-6
        )
        caller = Credentials(keys.create_key(db, SYSTEM, Role.PIPELINE).key, Role.PIPELINE)
        charges.charge(db, caller, ds.id, mechanism=CHARGE, wire=CHARGE.to_dict())  # warm

        def one() -> Any:
            return charges.charge(db, caller, ds.id, mechanism=CHARGE, wire=CHARGE.to_dict())

        def forget_what_was_sent() -> None:  # before the group of the queued charges runs
            sent.clear()
            rows.clear()

        answers = _run_as_one_group(db, ds.id, [one] * QUEUED, forget_what_was_sent)
        answered = {a.entry.seq: a.entry.id for a in answers}
        assert sorted(answered) == list(range(2, QUEUED + 2))
        # each answer's entry id is the id its row was stored under
        assert {seq: _stored_ids(db, ds.id)[seq] for seq in answered} == answered
        totals_writes = [
            s for s in sent if s.startswith("UPDATE DATASET_TOTAL") or "SAVED_TOTALS" in s
        ]
        entries = [n for s, n in zip(sent, rows, strict=True) if "INSERT INTO LEDGER_ENTRY" in s]
        assert sum(entries) == QUEUED, sent
        assert len(entries) == (QUEUED if db.is_sqlite else 1), sent  # PostgreSQL: one INSERT
        assert len(totals_writes) == 1, totals_writes
        report = verification.verify(db, SYSTEM)
        assert report.ok, report
        assert datasets.budget_view(db, SYSTEM, ds.id).entries == QUEUED + 1
    finally:
        db.dispose()


def test_a_unit_appending_more_entries_than_the_group_drew_ids_for(db_url: str) -> None:
    """A dp_event charge appends one entry per mechanism: in a group of 3 it takes the 3 ids
    drawn for the group (PostgreSQL), and the two charges after it insert theirs at once. Every
    answer names the row it was stored as, ids grow with seq, and verify is ok."""
    db = Database(db_url)
    try:
        ds = datasets.create_dataset(
            db, SYSTEM, name="mixed", budget_epsilon=1e3, budget_delta=1e-6
        )
        caller = Credentials(keys.create_key(db, SYSTEM, Role.PIPELINE).key, Role.PIPELINE)
        laplaces = [{"type": "LaplaceDpEvent", "noise_multiplier": 100.0 + i} for i in range(3)]
        event = {"type": "ComposedDpEvent", "events": laplaces}

        def batch() -> Any:
            return charges.charge_dp_event(db, caller, ds.id, event=event)

        def single() -> Any:
            return charges.charge(db, caller, ds.id, mechanism=CHARGE, wire=CHARGE.to_dict())

        first, *singles = _run_as_one_group(db, ds.id, [batch, single, single])
        answered = {e.seq: e.id for e in first.entries} | {a.entry.seq: a.entry.id for a in singles}
        assert sorted(answered) == [1, 2, 3, 4, 5]
        stored = _stored_ids(db, ds.id)
        assert stored == answered
        assert [stored[seq] for seq in sorted(stored)] == sorted(stored.values())
        assert verification.verify(db, SYSTEM).ok
    finally:
        db.dispose()
