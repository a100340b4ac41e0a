"""Invariants 1-3 on a ``pld`` dataset shared by two engines (two replicas' connection pools):
charges, holds committed or released, dry runs and one Idempotency-Key racing at the last bit
of budget. The committed ledger's epsilon is recomputed with dp_accounting's PLD (the oracle,
not our code), every 201 is in the ledger once, and verify finds the totals (the stored PLD
and the held PLD included) equal to what the ledger rebuilds."""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from dp_accounting.pld import privacy_loss_distribution as dpl
from sqlalchemy import create_engine, text

from app.accounting.mechanisms import mechanism_from_dict
from app.db.engine import Database
from app.errors import BudgetExceeded, Conflict
from app.principal import SYSTEM
from app.services import charges, datasets, reservations
from app.services.verification import stamp_if_empty, verify

THREADS = 12
BUDGET = (1.0, 1e-6)
LAPLACE = {"mechanism": "laplace", "epsilon": 0.12, "count": 1}
GAUSSIAN = {"mechanism": "gaussian", "sigma": 9.0, "sensitivity": 1.0, "count": 1}


def _oracle_epsilon(mechanisms: list[dict[str, Any]]) -> float:
    """dp_accounting's pessimistic PLD (interval 1e-4) of the ledger's Laplace and Gaussian
    entries, identical ones self-composed."""
    total = None
    for m in (LAPLACE, GAUSSIAN):
        n = sum(1 for e in mechanisms if e == m)
        if n == 0:
            continue
        one = (
            dpl.from_laplace_mechanism(1.0 / m["epsilon"])
            if m["mechanism"] == "laplace"
            else dpl.from_gaussian_mechanism(m["sigma"])
        )
        one = one.self_compose(n) if n > 1 else one
        total = one if total is None else total.compose(one)
    assert total is not None
    return float(total.get_epsilon_for_delta(BUDGET[1]))


def test_two_engines_race_on_a_pld_dataset(db_url: str) -> None:
    replicas = [Database(db_url), Database(db_url)]
    try:
        stamp_if_empty(replicas[0])  # as a server's start-up does
        ds = datasets.create_dataset(
            replicas[0],
            SYSTEM,
            name="pld-race",
            budget_epsilon=BUDGET[0],
            budget_delta=BUDGET[1],
            accounting="pld",
            adaptive=False,
        )
        barrier = threading.Barrier(THREADS)

        def one(i: int) -> list[tuple[str, Any]]:
            db = replicas[i % 2]
            wire = LAPLACE if i % 3 else GAUSSIAN
            m = mechanism_from_dict(wire)
            out: list[tuple[str, Any]] = []
            barrier.wait()
            for step in range(4):
                try:
                    if (i + step) % 4 == 0:  # a hold, committed or released by the other replica
                        hold = reservations.reserve(
                            db,
                            SYSTEM,
                            ds.id,
                            mechanism=m,
                            wire=wire,
                            ttl_seconds=600,
                            label=None,
                            metadata=None,
                            max_ttl_seconds=3600,
                        )
                        other = replicas[(i + 1) % 2]
                        if step % 2:
                            reservations.release(other, SYSTEM, hold.id)
                        else:
                            done = reservations.commit(other, SYSTEM, hold.id)
                            out.append(("committed", done.ledger_entry_id))
                    elif (i + step) % 4 == 1:
                        charges.charge(db, SYSTEM, ds.id, mechanism=m, wire=wire, dry_run=True)
                    else:
                        if i % 4 == 2:  # three threads retry one request with one key
                            c = charges.charge(
                                db,
                                SYSTEM,
                                ds.id,
                                mechanism=mechanism_from_dict(LAPLACE),
                                wire=LAPLACE,
                                idempotency_key="same-key",
                            )
                        else:
                            c = charges.charge(db, SYSTEM, ds.id, mechanism=m, wire=wire)
                        out.append(("charged", c.entry.id))  # type: ignore[union-attr]
                except (BudgetExceeded, Conflict):
                    out.append(("refused", None))
            return out

        with ThreadPoolExecutor(THREADS) as pool:
            answers = [a for out in pool.map(one, range(THREADS)) for a in out]
        acknowledged = {entry for what, entry in answers if what in ("charged", "committed")}
        assert acknowledged and ("refused", None) in answers  # the race reached the budget
        engine = create_engine(db_url)
        try:
            with engine.connect() as conn:
                rows = conn.execute(
                    text("SELECT id, mechanism FROM ledger_entry WHERE dataset_id = :d"),
                    {"d": ds.id},
                ).all()
        finally:
            engine.dispose()
        ids = {row[0] for row in rows}
        assert acknowledged <= ids and len(ids) == len(rows)  # nothing acknowledged is lost
        assert len(rows) == len(acknowledged)  # the Idempotency-Key charged once
        stored = [json.loads(row[1]) if isinstance(row[1], str) else row[1] for row in rows]
        ledger = [{k: v for k, v in m.items() if k != "v"} for m in stored]
        assert _oracle_epsilon(ledger) <= BUDGET[0] * (1 + 1e-6)
        assert datasets.get_dataset(replicas[0], SYSTEM, ds.id).spent.epsilon <= BUDGET[0]
        assert verify(replicas[1]).ok
    finally:
        for db in replicas:
            db.dispose()
