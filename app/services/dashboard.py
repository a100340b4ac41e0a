"""Read models for the dashboard: the spend-over-time series and the curves of a dataset.

Both cost O(points), not O(ledger): the series reads the ``spent_epsilon`` each ledger entry
recorded when it was admitted (the spend at the budget delta right after it) at evenly spaced
sequence numbers through the ``(dataset_id, seq)`` unique index; the curves come from the
running totals.
"""

from __future__ import annotations

import numpy as np
from sqlalchemy import select

from app import responses as r
from app.accounting.orders import ORDERS
from app.db.engine import Database
from app.db.models import LedgerEntry
from app.principal import Caller
from app.services import answers, state
from app.services.answers import finite_or_none
from app.services.auth import authenticated

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


def series(db: Database, caller: Caller, ref: str, points: int) -> r.Series:
    """Spend after each ledger entry (downsampled to ``points``), with the budget."""
    with db.read() as s:
        principal = authenticated(db, caller, s)
        st = state.load(s, ref, principal)
        n = st.entry_count
        seqs = sample_seqs(n, points)
        rows = (
            s.execute(
                select(
                    LedgerEntry.seq,
                    LedgerEntry.created_at,
                    LedgerEntry.kind,
                    LedgerEntry.spent_epsilon,
                )
                .where(LedgerEntry.dataset_id == st.id, LedgerEntry.seq.in_(seqs))
                .order_by(LedgerEntry.seq)
            ).all()
            if seqs
            else []
        )
        return r.Series(
            dataset_id=st.id,
            entries=n,
            downsampled=n > len(seqs),
            budget=answers.budget(st),
            points=[
                r.SeriesPoint(
                    seq=row.seq, created_at=row.created_at, kind=row.kind, epsilon=row.spent_epsilon
                )
                for row in rows
            ],
        )


def curves(db: Database, caller: Caller, ref: str) -> r.Curves:
    """The composed RDP curve against the budget's, and the (epsilon, delta) trade-off."""
    with db.read() as s:
        principal = authenticated(db, caller, s)
        st = state.load(s, ref, principal)
    f, curve = st.filter, st.committed
    at_budget = f.spend(curve)
    limit = f.budget_curve()
    tradeoff = []
    for delta in sorted({*TRADEOFF_DELTAS, st.budget.delta}):
        sp = at_budget if delta == st.budget.delta else f.spend_at(curve, delta)
        tradeoff.append(
            r.TradeoffPoint(delta=delta, epsilon=finite_or_none(sp.epsilon), method=sp.method)
        )
    return r.Curves(
        dataset_id=st.id,
        filter=f.kind.value,
        budget=answers.budget(st),
        spent=r.SpentAtOrder(
            **answers.spent(st, curve, at_budget).model_dump(), order=at_budget.order
        ),
        orders=[float(a) for a in ORDERS],
        rdp=[finite_or_none(float(x)) for x in curve.rdp],
        budget_rdp=[float(x) if np.isfinite(x) and x > 0 else None for x in limit],
        tradeoff=tradeoff,
    )


__all__ = ["MAX_SERIES_POINTS", "TRADEOFF_DELTAS", "curves", "sample_seqs", "series"]
