"""Answers about a dataset's budget, built from its state without any conversion.

Spend, remaining and exhausted come from the totals row (the spend its filter guaranteed when
the last entry was admitted), so every read is O(1) and computes nothing.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from sqlalchemy import select

from app import responses as r
from app.accounting.curve import PrivacyCurve
from app.accounting.filters import DryRun, Filter, Remaining, Spend, pure_spend
from app.accounting.pld_filter import PldFilter
from app.db.models import ApiKey
from app.services import blocks as block_keys
from app.services.state import DatasetState
from app.services.tallies import Tally


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
    return _plus_holds(st.totals_filter, st.committed, st.spent, st.held_curve)


def _plus_holds(
    flt: Filter, curve: PrivacyCurve, sp: Spend, held: PrivacyCurve | None
) -> tuple[PrivacyCurve, Spend]:
    """``curve`` + ``held`` and its spend under ``flt``, never below ``sp`` (the spend without
    the holds): one conversion; (``curve``, ``sp``) when there are no holds. A dataset's view
    and a tally's (an allocation, a block) both count their holds by it."""
    if held is None:
        return curve, sp
    total = curve + held
    out = flt.spend(total)
    if out.epsilon < sp.epsilon:
        out = dataclasses.replace(out, epsilon=sp.epsilon)
    return total, out


def spend_at(st: DatasetState, delta: float) -> Spend:
    """The epsilon at ``delta`` the dataset reports, under ``totals_filter``: a ``pld``
    dataset's from its PLD (loaded: ``state.load_pld``) or its curve, the least; at the
    budget delta, the filter's ``spend`` (capped at eps_B while admitted), as ``/budget``. At
    delta = 0, the pure-DP sum (``pure_spend``; infinite when any entry has no pure bound)."""
    f = st.totals_filter
    if delta == 0.0:
        return pure_spend(st.committed)
    if st.pld is not None:
        pf = PldFilter(f)
        if delta == f.budget.delta:
            return pf.spend(st.pld, st.committed)
        return pf.spend_at(st.pld, st.committed, delta)
    return f.spend(st.committed) if delta == f.budget.delta else f.spend_at(st.committed, delta)


def remaining_view(left: Remaining) -> r.Remaining:
    """The wire form of a filter's ``Remaining``."""
    return r.Remaining(
        epsilon=left.epsilon, delta=left.delta, rho=left.rho, entry_delta=left.entry_delta
    )


def remaining(st: DatasetState, view: tuple[PrivacyCurve, Spend] | None = None) -> r.Remaining:
    """What is left after the ledger and the active holds (the filter's rule). A partitioned
    dataset: what its lifetime budget leaves, or with none, a fresh block's whole budget."""
    if st.partition_unit is not None and st.lifetime is None:
        left = st.filter.remaining(PrivacyCurve.zero(), st.filter.spend(PrivacyCurve.zero()))
        return remaining_view(left)
    total, sp = with_holds(st) if view is None else view
    left = st.totals_filter.remaining(total, sp)
    return remaining_view(left)


def held_epsilon(with_holds: float, without: float) -> float | None:
    """``Reserved.epsilon``: the spend with the holds minus the spend without, never negative;
    None where either is not finite (both infinite gave nan, which ``max`` clamped to 0.0: as if
    the holds added nothing)."""
    if not (math.isfinite(with_holds) and math.isfinite(without)):
        return None
    return max(0.0, with_holds - without)


def reserved(st: DatasetState, view: tuple[PrivacyCurve, Spend] | None = None) -> r.Reserved | None:
    """The active holds (None when there are none): their count, rho, earliest expiry, and
    epsilon = the spend with them minus the spend without (``held_epsilon``)."""
    held = st.held_curve
    if held is None:
        return None
    _, sp = with_holds(st) if view is None else view
    return r.Reserved(
        rho=finite_or_none(held.rho),
        count=st.held.count,
        epsilon=held_epsilon(sp.epsilon, st.spent.epsilon),
        next_expiry=st.held_next_expiry,
    )


def budget_state(st: DatasetState, view: tuple[PrivacyCurve, Spend] | None = None) -> r.BudgetState:
    """``exhausted``: the filter says so for the ledger with its holds, or the remaining epsilon
    is below ``EXHAUSTED_TOLERANCE`` x the budget epsilon; ``warning``: the spend with holds is
    at least ``warning_threshold`` x the budget epsilon; ``ok`` otherwise."""
    if st.partition_unit is not None and st.lifetime is None:
        return "ok"  # blocks have their own budgets, and a new block a fresh one
    total, sp = with_holds(st) if view is None else view
    flt = st.totals_filter  # on a partitioned dataset, its lifetime budget's
    eps_b = flt.budget.epsilon
    left = flt.remaining(total, sp)
    if flt.exhausted(total, sp) or left.epsilon < EXHAUSTED_TOLERANCE * eps_b:
        return "exhausted"
    if sp.epsilon >= st.warning_threshold * eps_b:
        return "warning"
    return "ok"


def exhausted(st: DatasetState) -> bool:
    """No budget left (the filter's rule, on the stored spend: no conversion). A partitioned
    dataset is exhausted only when its lifetime budget is (a new block has a fresh budget)."""
    if st.partition_unit is not None and st.lifetime is None:
        return False
    return st.totals_filter.exhausted(st.committed, st.spent)


FILTER_DESCRIPTIONS: dict[str, str] = {
    "rdp_fixed_orders": "Adaptive queries allowed (Rényi filter at a fixed order)",
    "rdp_union_bound": "Adaptive queries allowed (older, looser rule)",
    "rdp": "Parameters fixed in advance (Rényi DP, tight)",
    "zcdp": "Parameters fixed in advance (zCDP)",
    "zcdp_filter": "Adaptive queries allowed (zCDP filter)",
    "gdp": "Adaptive Gaussian queries, exact",
    "pld": "Parameters fixed in advance, tightest (privacy loss distribution)",
}
"""What each filter guarantees, in a privacy officer's words (the dashboard shows the same
words; docs/accounting.md, "Choosing an accounting")."""


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
        filter_params=f.params_dict(),
        entry_delta_budget=f.entry_delta,
        lifetime_entry_delta_budget=st.lifetime.entry_delta if st.lifetime is not None else 0.0,
        filter_description=FILTER_DESCRIPTIONS.get(f.kind.value, f.kind.value)
        + (
            f"; delta {f.entry_delta:g} set aside for mechanisms with their own delta"
            if f.entry_delta > 0.0
            else ""
        ),
        spent=spent(st),
        remaining=remaining(st, view),
        exhausted=exhausted(st),
        entries=st.entry_count,
        mechanism_counts=st.mechanism_counts,
        created_at=st.created_at,
        updated_at=st.updated_at,
        last_entry_at=st.last_entry_at,
        partition=partition(st),
        lifetime_budget=lifetime_budget(st),
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
        spent_epsilon=finite_or_none(m["spent_epsilon"]),
        source=str(m["source"]),
        key_id=m["key_id"],
        reservation_id=m["reservation_id"],
        allocation_id=m.get("allocation_id"),
        blocks=block_span(m.get("block_from"), m.get("block_to")),
        key_name=m.get("key_name"),
        allocation_name=m.get("allocation_name"),
    )


# --- budget structures (issue 15) -------------------------------------------------------------


def block_span(first: str | None, last: str | None) -> r.BlockSpan | None:
    return None if first is None or last is None else r.BlockSpan(**{"from": first, "to": last})


def tally_spent(t: Tally, curve: PrivacyCurve | None = None, sp: Spend | None = None) -> r.Spent:
    """A tally's spend (or, with ``curve`` and ``sp``, what it would be)."""
    curve = t.committed if curve is None else curve
    sp = t.spent if sp is None else sp
    return r.Spent(
        epsilon=sp.epsilon,
        delta=sp.delta,
        rho=finite_or_none(curve.rho),
        pure_epsilon=finite_or_none(curve.pure_eps),
        method=sp.method,
        filter=t.filter.kind.value,
    )


def spend_with_holds(t: Tally) -> Spend:
    """The spend of ``t``'s charges and active holds together (what admission counts)."""
    return tally_with_holds(t)[1]


def tally_with_holds(t: Tally) -> tuple[PrivacyCurve, Spend]:
    """The composed curve of ``t``'s charges and active holds, and its spend (one conversion
    when it holds something)."""
    return _plus_holds(t.filter, t.committed, t.spent, t.held.total())


def tally_view(t: Tally, dry: DryRun | None = None) -> dict[str, Any]:
    """spent / remaining / exhausted / entries / reserved of a tally (after ``dry``, if given).
    As a dataset's view: ``remaining`` is what is left after the active holds (the admission
    counts them), ``reserved.epsilon`` the spend with them minus the spend without; one more
    conversion for a tally with holds."""
    curve, sp = (t.committed, t.spent) if dry is None else (dry.after, dry.spend_after)
    held = t.held.total()
    total, sp_held = _plus_holds(t.filter, curve, sp, held)
    reserved = (
        None
        if held is None
        else r.Reserved(
            rho=finite_or_none(held.rho),
            count=t.held.count,
            epsilon=held_epsilon(sp_held.epsilon, sp.epsilon),
            next_expiry=t.next_expiry,
        )
    )
    left = t.filter.remaining(total, sp_held)
    return {
        "spent": tally_spent(t, curve, sp),
        "remaining": remaining_view(left),
        "exhausted": t.filter.exhausted(curve, sp),
        "entries": t.entry_count + (dry is not None),
        "reserved": reserved,
    }


def block(t: Tally, dry: DryRun | None = None) -> r.Block:
    return r.Block(block=str(t.key), **tally_view(t, dry))


def allocation(
    t: Tally,
    dataset_id: str,
    dry: DryRun | None = None,
    most_spent: Tally | None = None,
    partitioned: bool = False,
) -> r.Allocation:
    """An allocation's view. Partitioned datasets: its budget applies per block, so spent,
    remaining and exhausted are those of its most-spent block (``most_spent``; none charged
    yet: an empty block) and ``lifetime_spent`` composes all its charges."""
    view = tally_view(t, dry)
    extra: dict[str, Any] = {}
    if partitioned:
        extra["lifetime_spent"] = view["spent"]
        if most_spent is not None:
            per_block = tally_view(most_spent)
            extra["most_spent_block"] = most_spent.key
        else:
            zero = PrivacyCurve.zero()
            sp = t.filter.spend(zero)
            left = t.filter.remaining(zero, sp)
            per_block = {
                "spent": tally_spent(t, zero, sp),
                "remaining": remaining_view(left),
                "exhausted": False,
            }
        view.update({k: per_block[k] for k in ("spent", "remaining", "exhausted")})
    return r.Allocation(
        id=t.owner,
        dataset_id=dataset_id,
        name=str(t.name),
        budget=r.Budget(epsilon=t.budget.epsilon, delta=t.budget.delta),
        entry_delta_budget=t.filter.entry_delta,
        filter_params=t.filter.params_dict(),
        created_at=t.created_at,
        updated_at=t.updated_at,
        **view,
        **extra,
    )


class _Target(Protocol):
    @property
    def allocation(self) -> Tally | None: ...
    @property
    def blocks(self) -> tuple[Tally, ...]: ...
    @property
    def allocation_blocks(self) -> tuple[Tally, ...]: ...


def structures(target: _Target | None, dataset_id: str = "") -> dict[str, Any]:
    """The ``allocation`` / ``blocks`` / ``allocation_blocks`` members of a charge's answer."""
    if target is None:
        return {}
    out: dict[str, Any] = {}
    if target.blocks:
        out["blocks"] = [block(t) for t in target.blocks]
        if target.allocation_blocks:
            out["allocation_blocks"] = [block(t) for t in target.allocation_blocks]
    elif target.allocation is not None:
        out["allocation"] = allocation(target.allocation, dataset_id)
    return out


def structures_after(
    target: _Target | None, checks: Sequence[tuple[Tally, DryRun]], dataset_id: str = ""
) -> dict[str, Any]:
    """The same members as ``structures``, as they would be after a dry run's charge."""
    if target is None:
        return {}
    dry = {id(t): d for t, d in checks}
    out: dict[str, Any] = {}
    if target.blocks:
        out["blocks"] = [block(t, dry.get(id(t))) for t in target.blocks]
        if target.allocation_blocks:
            out["allocation_blocks"] = [block(t, dry.get(id(t))) for t in target.allocation_blocks]
    elif target.allocation is not None:
        a = target.allocation
        out["allocation"] = allocation(a, dataset_id, dry.get(id(a)))
    return out


def partition(st: DatasetState) -> r.Partition | None:
    unit = st.partition_unit
    return None if unit is None else r.Partition(unit=unit, max_span=block_keys.MAX_SPAN[unit])


def lifetime_budget(st: DatasetState) -> r.Budget | None:
    if st.lifetime is None:
        return None
    return r.Budget(epsilon=st.lifetime.budget.epsilon, delta=st.lifetime.budget.delta)


def key_labels(s: Any, key_ids: Iterable[str | None]) -> dict[str, str | None]:
    """The labels of these keys (one query), for lists that name who made each row as the
    ledger does (``key_name``)."""
    ids = {k for k in key_ids if k is not None}
    if not ids:
        return {}
    rows = s.execute(select(ApiKey.id, ApiKey.label).where(ApiKey.id.in_(ids))).all()
    return dict(rows)


__all__ = [
    "allocation",
    "block",
    "block_span",
    "key_labels",
    "lifetime_budget",
    "spend_at",
    "spend_with_holds",
    "partition",
    "structures",
    "structures_after",
    "tally_spent",
    "tally_view",
    "EXHAUSTED_TOLERANCE",
    "FILTER_DESCRIPTIONS",
    "budget",
    "budget_state",
    "reserved",
    "with_holds",
    "budget_view",
    "dataset",
    "entry",
    "exhausted",
    "finite_or_none",
    "held_epsilon",
    "remaining",
    "requested",
    "spent",
]
