"""Read models for the dashboard: the spend-over-time series and the curves of a dataset.

The series also carries the dataset's budget changes (from the audit trail: when, old and new
budget, not who), so the chart can mark them for a viewer key that cannot read ``/v1/audit``.

Both cost O(points), not O(ledger): the series reads the ``spent_epsilon`` each ledger entry
recorded when it was admitted (the spend at the budget delta right after it) at evenly spaced
sequence numbers through the ``(dataset_id, seq)`` unique index; the curves come from the
running totals (and on a ``pld`` dataset its stored PLD, a few MiB at most).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sqlalchemy import select

from app import responses as r
from app.accounting.orders import ORDERS
from app.db.engine import Database
from app.db.models import AuditEvent, LedgerEntry
from app.principal import Caller
from app.services import answers, state
from app.services.answers import finite_or_none
from app.services.auth import authenticated

MAX_SERIES_POINTS = 5000
MAX_BUDGET_CHANGES = 200
MAX_CHANGE_EVENTS = 1000
"""Audit events read for the series' budget changes (lifetime budget changes are among other
``dataset.changed`` events, picked out after the read): bounded work per request."""
BUDGET_ACTIONS = ("budget.raised", "budget.lowered", "budget.changed")
"""Audit actions of a budget change (``update_dataset``)."""
TRADEOFF_DELTAS = tuple(float(10.0**-k) for k in np.arange(15.0, 0.75, -0.5))
"""delta from 1e-15 to 1e-1 in half decades, for the (epsilon, delta) trade-off curve."""


def budget_scope(st: state.DatasetState) -> r.BudgetScope:
    """Which budget ``totals_filter``'s is: a partitioned dataset's lifetime budget, or with
    none the budget of each block (the composed spend of all blocks is not comparable with
    it: four blocks each 60 % used compose to more than one block's budget), else the
    dataset's."""
    if st.partition_unit is None:
        return "dataset"
    return "lifetime" if st.lifetime is not None else "per_block"


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
        # the budget of totals_filter: a partitioned dataset's lifetime budget (its changes are
        # audited as dataset.changed), else the dataset's; with no lifetime budget that is the
        # per-block budget, which does not cap the plotted spend (``budget_scope`` per_block)
        lifetime = st.totals_filter is not st.filter
        which = "lifetime_budget" if lifetime else "budget"
        # a lifetime change made in one PATCH with the block budget is audited as budget.*
        actions = (*BUDGET_ACTIONS, "dataset.changed") if lifetime else BUDGET_ACTIONS
        events = s.execute(
            select(AuditEvent.created_at, AuditEvent.action, AuditEvent.details)
            .where(AuditEvent.dataset_id == st.id, AuditEvent.action.in_(actions))
            .order_by(AuditEvent.created_at.desc(), AuditEvent.id.desc())
            .limit(MAX_CHANGE_EVENTS)
        ).all()
        changes = [c for c in events if which in ((c.details or {}).get("changes") or {})]
        changes = changes[:MAX_BUDGET_CHANGES]
        limit = st.totals_filter.budget
        return r.Series(
            dataset_id=st.id,
            entries=n,
            downsampled=n > len(seqs),
            budget=r.Budget(epsilon=limit.epsilon, delta=limit.delta),
            budget_scope=budget_scope(st),
            points=[
                r.SeriesPoint(
                    seq=row.seq, created_at=row.created_at, kind=row.kind, epsilon=row.spent_epsilon
                )
                for row in rows
            ],
            budget_changes=[
                r.BudgetChange(
                    created_at=c.created_at,
                    action=c.action,
                    old=_budget_of(c.details, which, "old"),
                    new=_budget_of(c.details, which, "new"),
                )
                for c in reversed(changes)
            ],
        )


def _budget_of(details: dict[str, Any], field: str, which: str) -> dict[str, float] | None:
    """The old or new budget (``field``: ``budget`` or ``lifetime_budget``) recorded in a
    budget change's audit details, if any."""
    budget = (details.get("changes") or {}).get(field) or {}
    value = budget.get(which)
    return {k: float(v) for k, v in value.items()} if isinstance(value, dict) else None


def curves(db: Database, caller: Caller, ref: str) -> r.Curves:
    """The composed RDP curve against the budget's, and the (epsilon, delta) trade-off."""
    with db.read() as s:
        principal = authenticated(db, caller, s)
        st = state.load(s, ref, principal)
        if st.is_pld:
            state.load_pld(s, st)
    f, curve = st.totals_filter, st.committed  # partitioned: the lifetime budget's, if any
    limit = f.budget_curve()
    # the spend every other view reports (``answers.spend_at``: a pld dataset's from its
    # stored PLD or its curve, the least), as /budget and /spend; the RDP chart is the curve's
    at_budget = answers.spend_at(st, f.budget.delta)
    tradeoff = []
    for delta in sorted({*TRADEOFF_DELTAS, f.budget.delta}):
        sp = at_budget if delta == f.budget.delta else answers.spend_at(st, delta)
        tradeoff.append(
            r.TradeoffPoint(delta=delta, epsilon=finite_or_none(sp.epsilon), method=sp.method)
        )
    return r.Curves(
        dataset_id=st.id,
        filter=f.kind.value,
        budget=r.Budget(epsilon=f.budget.epsilon, delta=f.budget.delta),
        spent=r.SpentAtOrder(
            **answers.spent(st, curve, at_budget).model_dump(), order=at_budget.order
        ),
        orders=[float(a) for a in ORDERS],
        rdp=[finite_or_none(float(x)) for x in curve.rdp],
        budget_rdp=[float(x) if np.isfinite(x) and x > 0 else None for x in limit],
        tradeoff=tradeoff,
        budget_scope=budget_scope(st),
    )


__all__ = [
    "MAX_SERIES_POINTS",
    "TRADEOFF_DELTAS",
    "budget_scope",
    "curves",
    "sample_seqs",
    "series",
]
