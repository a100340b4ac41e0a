"""Answers about a dataset's budget, built from its state without any conversion.

Spend, remaining and exhausted come from the totals row (the spend its filter guaranteed when
the last entry was admitted), so every read is O(1) and computes nothing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from app import responses as r
from app.accounting.curve import PrivacyCurve
from app.accounting.filters import Spend
from app.services.state import DatasetState


def finite_or_none(x: float | None) -> float | None:
    """JSON has no infinity: infinite values are reported as null."""
    if x is None or not math.isfinite(x):
        return None
    return float(x)


def budget(st: DatasetState) -> r.Budget:
    return r.Budget(epsilon=st.budget.epsilon, delta=st.budget.delta)


def spent(st: DatasetState, curve: PrivacyCurve | None = None, sp: Spend | None = None) -> r.Spent:
    """``spent`` as reported everywhere: epsilon at the budget delta under the filter."""
    curve = st.committed if curve is None else curve
    sp = st.spent if sp is None else sp
    return r.Spent(
        epsilon=sp.epsilon,
        delta=sp.delta,
        rho=finite_or_none(curve.rho),
        pure_epsilon=finite_or_none(curve.pure_eps),
        method=sp.method,
        filter=st.filter.kind.value,
    )


def remaining(st: DatasetState) -> r.Remaining:
    """What is left (the filter's rule, on the stored spend: no conversion)."""
    left = st.filter.remaining(st.committed, st.spent)
    return r.Remaining(epsilon=left.epsilon, delta=left.delta, rho=left.rho)


def exhausted(st: DatasetState) -> bool:
    """No budget left (the filter's rule, on the stored spend: no conversion)."""
    return st.filter.exhausted(st.committed, st.spent)


def dataset(st: DatasetState) -> r.Dataset:
    """The public view of a dataset with its current spend."""
    f = st.filter
    return r.Dataset(
        id=st.id,
        name=st.name,
        description=st.description,
        budget=budget(st),
        accounting=st.accounting,
        adaptive=st.adaptive,
        allowed_mechanisms=st.allowed_mechanisms,
        filter=f.kind.value,
        filter_bound={"rho": f.bound} if f.bound is not None else None,
        filter_params=f.params.to_dict() if f.params is not None else None,
        spent=spent(st),
        remaining=remaining(st),
        exhausted=exhausted(st),
        entries=st.entry_count,
        mechanism_counts=st.mechanism_counts,
        created_at=st.created_at,
        updated_at=st.updated_at,
        last_entry_at=st.last_entry_at,
        archived=st.archived_at is not None,
        archived_at=st.archived_at,
    )


def budget_view(st: DatasetState) -> r.BudgetView:
    """``GET /budget``."""
    held = st.held_curve
    return r.BudgetView(
        dataset_id=st.id,
        name=st.name,
        budget=budget(st),
        spent=spent(st),
        remaining=remaining(st),
        exhausted=exhausted(st),
        entries=st.entry_count,
        filter=st.filter.kind.value,
        accounting=st.accounting,
        adaptive=st.adaptive,
        reserved=None
        if held is None
        else r.Reserved(rho=finite_or_none(held.rho), count=st.held.count),
    )


def requested(st: DatasetState, mechanism: dict[str, Any], curve: PrivacyCurve) -> r.Requested:
    """What a charge asks for: the mechanism and its cost alone at the budget delta."""
    alone = st.filter.spend_at(curve, st.budget.delta)
    return r.Requested(
        mechanism=mechanism,
        rho=finite_or_none(curve.rho),
        pure_epsilon=finite_or_none(curve.pure_eps),
        epsilon=alone.epsilon,
    )


def entry(m: Mapping[Any, Any]) -> r.Entry:
    """A ledger entry from its stored columns (a row mapping or the inserted values)."""
    return r.Entry(
        id=m["id"],
        dataset_id=m["dataset_id"],
        seq=m["seq"],
        created_at=m["created_at"],
        mechanism=m["mechanism"],
        kind=m["kind"],
        count=m["count"],
        label=m["label"],
        metadata=m["metadata"],
        rho=finite_or_none(m["rho"]),
        pure_epsilon=finite_or_none(m["pure_eps"]),
        spent_epsilon=m["spent_epsilon"],
        source=str(m["source"]),
        key_id=m["key_id"],
        reservation_id=m["reservation_id"],
    )


__all__ = [
    "budget",
    "budget_view",
    "dataset",
    "entry",
    "exhausted",
    "finite_or_none",
    "remaining",
    "requested",
    "spent",
]
