"""Read models for the dashboard: the spend-over-time series and the curves of a dataset.

Both cost O(points), not O(ledger): the series reads the ``spent_epsilon`` each ledger entry
recorded when it was admitted (the spend at the budget delta right after it) at evenly spaced
sequence numbers through the ``(dataset_id, seq)`` unique index; the curves come from the
running totals.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sqlalchemy import select

from app.accounting.filters import Budget, FilterKind, budget_rdp_curve, spend
from app.accounting.orders import ORDERS
from app.db.engine import Database
from app.db.models import LedgerEntry
from app.services.curves import budget_json, finite_or_none, iso, spend_of, spent_json
from app.services.datasets import find_dataset
from app.services.keys import Principal

MAX_SERIES_POINTS = 5000
TRADEOFF_DELTAS = tuple(float(10.0**-k) for k in np.arange(15.0, 0.75, -0.5))
"""delta from 1e-15 to 1e-1 in half decades, for the (epsilon, delta) trade-off curve."""


def sample_seqs(n: int, points: int) -> list[int]:
    """At most ``points`` sequence numbers evenly spread over 1..n, always with 1 and n."""
    if n <= 0:
        return []
    if n <= points:
        return list(range(1, n + 1))
    return sorted({int(round(x)) for x in np.linspace(1, n, points)})


def series(db: Database, principal: Principal, ref: str, points: int) -> dict[str, Any]:
    """Spend after each ledger entry (downsampled to ``points``), with the budget."""
    with db.read() as s:
        st = find_dataset(s, ref, principal)
        n = st.totals.entry_count
        seqs = sample_seqs(n, points)
        rows = (
            s.execute(
                select(
                    LedgerEntry.seq,
                    LedgerEntry.created_at,
                    LedgerEntry.kind,
                    LedgerEntry.spent_epsilon,
                )
                .where(LedgerEntry.dataset_id == st.dataset.id, LedgerEntry.seq.in_(seqs))
                .order_by(LedgerEntry.seq)
            ).all()
            if seqs
            else []
        )
        return {
            "dataset_id": st.dataset.id,
            "entries": n,
            "downsampled": n > len(seqs),
            "budget": budget_json(st.dataset),
            "points": [
                {
                    "seq": r.seq,
                    "created_at": iso(r.created_at),
                    "kind": r.kind,
                    "epsilon": r.spent_epsilon,
                }
                for r in rows
            ],
        }


def curves(db: Database, principal: Principal, ref: str) -> dict[str, Any]:
    """The composed RDP curve against the budget's, and the (epsilon, delta) trade-off."""
    with db.read() as s:
        st = find_dataset(s, ref, principal)
    ds, curve = st.dataset, st.curve
    kind = FilterKind(ds.filter)
    budget = Budget(ds.budget_epsilon, ds.budget_delta)
    at_budget = spend_of(ds, curve)
    limit = budget_rdp_curve(kind, budget, ds.filter_bound)
    tradeoff = []
    for delta in sorted({*TRADEOFF_DELTAS, ds.budget_delta}):
        sp = at_budget if delta == ds.budget_delta else spend(kind, curve, delta)
        tradeoff.append(
            {"delta": delta, "epsilon": finite_or_none(sp.epsilon), "method": sp.method}
        )
    return {
        "dataset_id": ds.id,
        "filter": ds.filter,
        "budget": budget_json(ds),
        "spent": {**spent_json(ds, curve, at_budget), "order": at_budget.order},
        "orders": [float(a) for a in ORDERS],
        "rdp": [finite_or_none(float(x)) for x in curve.rdp],
        "budget_rdp": [float(x) if np.isfinite(x) and x > 0 else None for x in limit],
        "tradeoff": tradeoff,
    }


__all__ = ["MAX_SERIES_POINTS", "TRADEOFF_DELTAS", "curves", "sample_seqs", "series"]
