"""Answers about a dataset's budget, built from its state without any conversion.

Spend, remaining and exhausted come from the totals row (the spend its filter guaranteed when
the last entry was admitted), so every read is O(1) and computes nothing.
"""

from __future__ import annotations

import dataclasses
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


EXHAUSTED_TOLERANCE = 1e-9
"""A dataset whose remaining epsilon (after holds) is below this fraction of its budget epsilon
is ``exhausted``: no meaningful charge fits any more (docs/operations.md, Warnings)."""


def with_holds(st: DatasetState) -> tuple[PrivacyCurve, Spend]:
    """The composed curve of the ledger and the active holds, and its spend under the filter.

    Without holds: the stored totals (no conversion). With holds: one conversion of committed +
    held. A ``pld`` dataset's reads do not load its PLD, so its spend with holds is the
    filter's RDP bound of that curve (an upper bound), never below the ledger's stored spend.
    """
    held = st.held_curve
    if held is None:
        return st.committed, st.spent
    total = st.committed + held
    sp = st.filter.spend(total)
    if sp.epsilon < st.spent.epsilon:
        sp = dataclasses.replace(sp, epsilon=st.spent.epsilon)
    return total, sp


def remaining(st: DatasetState, view: tuple[PrivacyCurve, Spend] | None = None) -> r.Remaining:
    """What is left after the ledger and the active holds (the filter's rule)."""
    total, sp = with_holds(st) if view is None else view
    left = st.filter.remaining(total, sp)
    return r.Remaining(epsilon=left.epsilon, delta=left.delta, rho=left.rho)


def reserved(st: DatasetState, view: tuple[PrivacyCurve, Spend] | None = None) -> r.Reserved | None:
    """The active holds (None when there are none): their count, rho, earliest expiry, and
    epsilon = the spend with them minus the spend without (never negative)."""
    held = st.held_curve
    if held is None:
        return None
    _, sp = with_holds(st) if view is None else view
    return r.Reserved(
        rho=finite_or_none(held.rho),
        count=st.held.count,
        epsilon=max(0.0, sp.epsilon - st.spent.epsilon),
        next_expiry=st.held_next_expiry,
    )


def budget_state(st: DatasetState, view: tuple[PrivacyCurve, Spend] | None = None) -> r.BudgetState:
    """``exhausted``: the filter says so for the ledger with its holds, or the remaining epsilon
    is below ``EXHAUSTED_TOLERANCE`` x the budget epsilon; ``warning``: the spend with holds is
    at least ``warning_threshold`` x the budget epsilon; ``ok`` otherwise."""
    total, sp = with_holds(st) if view is None else view
    eps_b = st.budget.epsilon
    left = st.filter.remaining(total, sp)
    if st.filter.exhausted(total, sp) or left.epsilon < EXHAUSTED_TOLERANCE * eps_b:
        return "exhausted"
    if sp.epsilon >= st.warning_threshold * eps_b:
        return "warning"
    return "ok"


def exhausted(st: DatasetState) -> bool:
    """No budget left (the filter's rule, on the stored spend: no conversion)."""
    return st.filter.exhausted(st.committed, st.spent)


def dataset(st: DatasetState) -> r.Dataset:
    """The public view of a dataset with its current spend."""
    f = st.filter
    view = with_holds(st)
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
        remaining=remaining(st, view),
        exhausted=exhausted(st),
        entries=st.entry_count,
        mechanism_counts=st.mechanism_counts,
        created_at=st.created_at,
        updated_at=st.updated_at,
        last_entry_at=st.last_entry_at,
        archived=st.archived_at is not None,
        archived_at=st.archived_at,
        reserved=reserved(st, view),
        state=budget_state(st, view),
        warning_threshold=st.warning_threshold,
    )


def budget_view(st: DatasetState) -> r.BudgetView:
    """``GET /budget``."""
    view = with_holds(st)
    return r.BudgetView(
        dataset_id=st.id,
        name=st.name,
        budget=budget(st),
        spent=spent(st),
        remaining=remaining(st, view),
        exhausted=exhausted(st),
        entries=st.entry_count,
        filter=st.filter.kind.value,
        accounting=st.accounting,
        adaptive=st.adaptive,
        reserved=reserved(st, view),
        state=budget_state(st, view),
        warning_threshold=st.warning_threshold,
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
        key_name=m.get("key_name"),
    )


__all__ = [
    "EXHAUSTED_TOLERANCE",
    "budget",
    "budget_state",
    "reserved",
    "with_holds",
    "budget_view",
    "dataset",
    "entry",
    "exhausted",
    "finite_or_none",
    "remaining",
    "requested",
    "spent",
]
