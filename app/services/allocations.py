"""Allocations: sub-budgets of a dataset per team or analyst (issue 15).

An allocation has its own budget and running totals (table ``allocation``, the columns and
codec of ``dataset_total``). A charge or reservation naming it is admitted only if the
allocation stays within its budget **and** the dataset within the dataset's, both under the
dataset's filter, in one transaction under the dataset's lock (``admission.decide``). The
allocation's filter is the dataset's kind with the allocation's budget (for
``rdp_fixed_orders``, at an order chosen for the allocation's budget when it is created). On a
partitioned dataset the allocation's budget applies to each block, as the dataset's does.

Allocations may be overbooked: their budgets may add up to more than the dataset's. The
dataset's budget is the guarantee; an allocation only limits who may use how much of it.
``pld`` datasets have no allocations (422): a PLD per allocation is not kept.
"""

from __future__ import annotations

import secrets

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app import responses as r
from app.accounting.filters import Budget, Filter
from app.db.engine import Database
from app.db.models import Allocation, Reservation, utcnow
from app.errors import Conflict, Forbidden, NotFound, Unprocessable
from app.principal import Caller
from app.services import admission, answers, audit, partitions, state
from app.services.auth import authenticated
from app.services.state import DatasetState
from app.services.tallies import (
    ALLOCATION_BLOCK,
    ALLOCATION_ID_PREFIX,
    Tallies,
    Tally,
    allocation_columns,
    allocation_filter,
    allocation_tally,
    fill_next_expiry,
    zero_totals,
)


def _budget(epsilon: float, delta: float) -> Budget:
    try:
        return Budget(epsilon, delta)
    except ValueError as exc:
        raise Unprocessable(str(exc)) from None


def _filter_for(
    st: DatasetState, budget: Budget, kept: Filter | None = None, entry_delta: float | None = None
) -> Filter:
    """The allocation filter: the dataset's kind with the allocation's budget. For
    ``rdp_fixed_orders`` the order is the allocation's own, chosen when it is created from its
    budget and the dataset's allowed kinds (as a dataset's is, before its ledger has an entry:
    an order chosen for a larger budget can leave a smaller one unable to admit anything), and
    kept (``kept``: the allocation's current filter) when its budget changes, as is the part of
    its delta set aside for entries' own deltas (``entry_delta`` at creation: 422 unless the
    dataset sets a part aside too, without which such entries are refused anyway)."""
    if st.is_pld:
        raise Unprocessable(
            f"dataset {st.name!r} uses 'pld' accounting, which has no allocations (a PLD per "
            "allocation is not kept); use 'rdp' or 'zcdp' accounting for datasets split into "
            "allocations"
        )
    if entry_delta and st.filter.entry_delta == 0.0:
        raise Unprocessable(
            f"dataset {st.name!r} sets no part of its delta aside for mechanisms with their own "
            "delta (its entry_delta_budget is 0), so an allocation's would never be used; give "
            "the dataset one first (before its first charge)"
        )
    try:
        return allocation_filter(st.filter.kind, budget, kept, st.allowed_mechanisms, entry_delta)
    except ValueError as exc:
        raise Unprocessable(str(exc)) from None


def _views(s: Session, st: DatasetState, ts: list[Tally], tallies: Tallies) -> list[r.Allocation]:
    """The views of allocations ``ts``: on a partitioned dataset with their most-spent blocks;
    the active holds read once for all of them (``fill_next_expiry``)."""
    partitioned = st.partition_unit is not None
    tops = [
        partitions.most_spent(s, tallies, ALLOCATION_BLOCK, t.owner, t.filter)
        if partitioned
        else None
        for t in ts
    ]
    fill_next_expiry(s, st.id, [*ts, *tops])
    return [
        answers.allocation(t, st.id, most_spent=top, partitioned=partitioned)
        for t, top in zip(ts, tops, strict=True)
    ]


def _view(s: Session, st: DatasetState, t: Tally, tallies: Tallies) -> r.Allocation:
    return _views(s, st, [t], tallies)[0]


def _budget_action(old: Budget, new: Budget) -> str:
    if new.epsilon >= old.epsilon and new.delta >= old.delta:
        return "allocation.budget_raised"
    if new.epsilon <= old.epsilon and new.delta <= old.delta:
        return "allocation.budget_lowered"
    return "allocation.budget_changed"


def create_allocation(
    db: Database,
    caller: Caller,
    ref: str,
    *,
    name: str,
    epsilon: float,
    delta: float,
    entry_delta_budget: float = 0.0,
) -> r.Allocation:
    """Create allocation ``name`` of dataset ``ref`` with an empty ledger (audited); 409 when
    the dataset already has one of that name. ``entry_delta_budget``: the part of its delta set
    aside for mechanisms with their own delta (on a dataset that sets one aside)."""
    actor = authenticated(db, caller)
    if (why := actor.may_change_budgets()) is not None:
        raise Forbidden(why)
    budget = _budget(epsilon, delta)
    try:
        with db.write() as s:
            with admission.locked(s, ref, actor) as st:
                flt = _filter_for(st, budget, entry_delta=entry_delta_budget)
                clash = s.scalar(
                    select(Allocation.id).where(
                        Allocation.dataset_id == st.id, Allocation.name == name
                    )
                )
                if clash is not None:
                    raise Conflict(f"dataset {st.name!r} already has an allocation named {name!r}")
                now = utcnow()
                row = Allocation(
                    id=ALLOCATION_ID_PREFIX + secrets.token_hex(8),
                    dataset_id=st.id,
                    name=name,
                    budget_epsilon=budget.epsilon,
                    budget_delta=budget.delta,
                    filter_bound=flt.bound,
                    filter_params=flt.params_dict(),
                    entry_delta_budget=flt.entry_delta,
                    created_at=now,
                    updated_at=now,
                    **zero_totals(flt),
                )
                s.add(row)
                s.flush()
                audit.record(
                    s,
                    actor,
                    "allocation.created",
                    dataset_id=st.id,
                    target_id=row.id,
                    details={
                        "name": name,
                        "budget": {"epsilon": budget.epsilon, "delta": budget.delta},
                        **(
                            {"entry_delta_budget": flt.entry_delta} if flt.entry_delta > 0.0 else {}
                        ),
                        "dataset_budget": {
                            "epsilon": st.budget.epsilon,
                            "delta": st.budget.delta,
                        },
                    },
                )
                tallies = Tallies(st.id, st.filter.kind)
                return _view(s, st, tallies.allocation(s, name, lock=False), tallies)
    except IntegrityError:  # PostgreSQL: a concurrent create took the name after our check
        raise Conflict(f"the dataset already has an allocation named {name!r}") from None


def list_allocations(db: Database, caller: Caller, ref: str) -> r.AllocationList:
    """The dataset's allocations, by name."""
    with db.read() as s:
        principal = authenticated(db, caller, s)
        st = state.load(s, ref, principal)
        tallies = Tallies(st.id, st.filter.kind)
        rows = s.execute(
            allocation_columns().where(Allocation.dataset_id == st.id).order_by(Allocation.name)
        ).all()
        items = _views(s, st, [allocation_tally(row, st.filter.kind) for row in rows], tallies)
        return r.AllocationList(dataset_id=st.id, allocations=items)


def get_allocation(db: Database, caller: Caller, ref: str, name: str) -> r.Allocation:
    """One allocation with its spend (404 when the dataset has none of that name)."""
    with db.read() as s:
        principal = authenticated(db, caller, s)
        st = state.load(s, ref, principal)
        tallies = Tallies(st.id, st.filter.kind)
        try:
            t = tallies.allocation(s, name, lock=False)
        except Unprocessable:
            raise NotFound(f"no allocation {name!r} on dataset {st.name!r}") from None
        return _view(s, st, t, tallies)


def _charged_or_held(s: Session, t: Tally) -> bool:
    """Whether anything was charged or held through the allocation ``t`` (a held mechanism may
    have run): from then on its fixed order stays; before, a budget change chooses it again."""
    if t.entry_count > 0 or t.held.count > 0:
        return True
    held = s.scalars(select(Reservation.id).where(Reservation.allocation_id == t.owner)).first()
    return held is not None


def update_allocation(
    db: Database, caller: Caller, ref: str, name: str, budget_in: dict[str, float]
) -> r.Allocation:
    """Change an allocation's budget (audited with old and new values), under the dataset's
    lock. Its filter keeps its fixed orders once anything was charged or held through it
    (before, they are chosen for the new budget). Lowering it below the spend is allowed
    and leaves the allocation exhausted; nothing is ever reset."""
    actor = authenticated(db, caller)
    if (why := actor.may_change_budgets()) is not None:
        raise Forbidden(why)
    with db.write() as s:
        with admission.locked(s, ref, actor) as st:
            tallies = st.tallies()
            try:
                t = tallies.allocation(s, name)
            except Unprocessable:
                raise NotFound(f"no allocation {name!r} on dataset {st.name!r}") from None
            old = t.budget
            new = _budget(budget_in.get("epsilon", old.epsilon), budget_in.get("delta", old.delta))
            if new != old:
                kept = t.filter if _charged_or_held(s, t) else None
                flt = _filter_for(st, new, kept, t.filter.entry_delta)
                tallies.set_filter(t, flt)
                t.updated_at = utcnow()
                rebudgeted = 0
                if st.partition_unit is not None:
                    rebudgeted = partitions.rebudget(s, st, ALLOCATION_BLOCK, t.owner, flt)
                audit.record(
                    s,
                    actor,
                    _budget_action(old, new),
                    dataset_id=st.id,
                    target_id=t.owner,
                    details={
                        "name": name,
                        "changes": {
                            "budget": {
                                "old": {"epsilon": old.epsilon, "delta": old.delta},
                                "new": {"epsilon": new.epsilon, "delta": new.delta},
                            }
                        },
                        "spent_epsilon": t.spent.epsilon,
                        "blocks_rebudgeted": rebudgeted,
                    },
                )
        return _view(s, st, t, Tallies(st.id, st.filter.kind))


__all__ = ["create_allocation", "get_allocation", "list_allocations", "update_allocation"]
