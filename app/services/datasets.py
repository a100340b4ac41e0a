"""Datasets: create, list, read (with current spend), change budget or settings, spend queries.

Reads never touch ledger rows: the spend comes from the ``dataset_total`` row (O(1)).
"""

from __future__ import annotations

import math
import secrets
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app import responses as r
from app.accounting.curve import PrivacyCurve
from app.accounting.filters import Budget, Filter, FilterKind, filter_kind
from app.accounting.mechanisms import MECHANISMS
from app.accounting.pld import state_for_budget
from app.accounting.pld_filter import PldFilter
from app.db.codec import curve_columns
from app.db.engine import Database
from app.db.models import Allocation, Dataset, DatasetPld, DatasetTotal, Reservation, utcnow
from app.errors import Conflict, Forbidden, Unprocessable
from app.principal import Caller
from app.services import admission, answers, audit, partitions, state
from app.services.auth import authenticated, confirm_active
from app.services.tallies import BLOCK, allocation_filter, zero_totals


def _filter(
    accounting: str,
    adaptive: bool,
    allowed: list[str] | None,
    budget: Budget,
    keep: Filter | None = None,
    entry_delta: float = 0.0,
) -> Filter:
    """The dataset's filter; ``keep``: the filter it has once its ledger may have been seen,
    whose fixed orders a budget change keeps (re-picking the order after the ledger was seen
    would void the filter's guarantee; before, None: chosen for the new settings, as new);
    ``entry_delta``: the part of the budget delta set aside for entries' own deltas."""
    if allowed is not None:
        unknown = sorted(set(allowed) - set(MECHANISMS))
        if unknown:
            raise Unprocessable(
                f"allowed_mechanisms has unknown kinds {unknown}; known: {sorted(MECHANISMS)}"
            )
        if not allowed:
            raise Unprocessable("allowed_mechanisms must be null (all) or a non-empty list")
    try:
        kind = _kept_kind(filter_kind(accounting, adaptive, allowed), keep)
        orders = keep.params.orders if keep is not None and keep.params is not None else None
        if keep is not None and keep.kind is not kind:
            orders = None
        return Filter.create(kind, budget, allowed, orders, entry_delta)
    except ValueError as exc:
        raise Unprocessable(str(exc)) from None


def _kept_kind(kind: FilterKind, keep: Filter | None) -> FilterKind:
    """``kind`` (what the settings give today), except that a dataset created before
    ``rdp_fixed_orders`` keeps its ``rdp_union_bound`` while its settings still give the filter
    that replaced it: a change of budget, name or description moved such a ledger to a fixed
    order picked after it was seen, a switch of filters mid-ledger that neither theorem covers
    (DESIGN.md, "Accounting model"; docs/formulas.md section 2.6). Settings that give another
    kind (``accounting``, ``adaptive``: changed only before the first charge) still pick it."""
    if (
        keep is not None
        and keep.kind is FilterKind.RDP_UNION_BOUND
        and kind is FilterKind.RDP_FIXED_ORDERS
    ):
        return keep.kind
    return kind


def _splits_agree(entry_delta: float, lifetime: Filter | None, asked: float = 0.0) -> None:
    """422 unless a partitioned dataset's two splits of the delta agree: with a lifetime budget,
    the blocks' split (``entry_delta_budget``: each block's filter is the dataset's) needs the
    lifetime budget's own (``lifetime_entry_delta_budget``), since the entries' own deltas of
    all blocks add up there, and the lifetime's split is of no use without the blocks' (they
    refuse such entries then), nor without a lifetime budget (``asked``: the split the request
    gave, which ``lifetime`` holds when it has one)."""
    if asked > 0.0 and lifetime is None:
        raise Unprocessable(
            "lifetime_entry_delta_budget is part of a lifetime budget's delta: give "
            "lifetime_budget (on a partitioned dataset) too, or leave it out"
        )
    life = lifetime.entry_delta if lifetime is not None else 0.0
    if entry_delta > 0.0 and lifetime is not None and life == 0.0:
        raise Unprocessable(
            "a partitioned dataset with a lifetime budget and an entry_delta_budget (each "
            "block's part of its delta for entries' own deltas) needs a "
            "lifetime_entry_delta_budget too: the lifetime budget's part of its delta for "
            "them (the entries' own deltas of all blocks add up there)"
        )
    if life > 0.0 and entry_delta == 0.0:
        raise Unprocessable(
            "lifetime_entry_delta_budget is set aside for entries with their own delta, which "
            "the blocks refuse (entry_delta_budget is 0), so it would never be used; give "
            "entry_delta_budget too, or leave lifetime_entry_delta_budget out"
        )


def _budget(epsilon: float, delta: float) -> Budget:
    try:
        return Budget(epsilon, delta)
    except ValueError as exc:
        raise Unprocessable(str(exc)) from None


def create_dataset(
    db: Database,
    caller: Caller,
    *,
    name: str,
    budget_epsilon: float,
    budget_delta: float,
    accounting: str = "rdp",
    adaptive: bool = True,
    allowed_mechanisms: list[str] | None = None,
    description: str | None = None,
    partition_unit: str | None = None,
    lifetime_budget: tuple[float, float] | None = None,
    entry_delta_budget: float = 0.0,
    lifetime_entry_delta_budget: float = 0.0,
) -> r.Dataset:
    """Create a dataset with an empty ledger; its filter is fixed here (audited). A key scoped
    to datasets cannot create one (403): it could neither see it nor be given it.

    ``partition_unit`` (day, week, month) makes it time-partitioned: the budget applies to each
    block; ``lifetime_budget`` (partitioned only) caps the composition of all its charges.
    ``entry_delta_budget`` (adaptive): the part of the budget delta (of each block's, when
    partitioned) set aside for entries with their own delta (``app.accounting.filters``);
    ``lifetime_entry_delta_budget``: the lifetime budget's part (needed with both)."""
    actor = authenticated(db, caller)
    if (why := actor.may_change_budgets()) is not None:
        raise Forbidden(why)
    if actor.dataset_ids is not None:
        raise Forbidden(
            "a key scoped to datasets cannot create datasets; use an unscoped admin key"
        )
    budget = _budget(budget_epsilon, budget_delta)
    if allowed_mechanisms is not None:
        allowed_mechanisms = sorted(set(allowed_mechanisms))
    flt = _filter(accounting, adaptive, allowed_mechanisms, budget, None, entry_delta_budget)
    lifetime = _structure_filters(
        flt, partition_unit, lifetime_budget, allowed_mechanisms, lifetime_entry_delta_budget
    )
    _splits_agree(flt.entry_delta, lifetime, lifetime_entry_delta_budget)
    zero = PrivacyCurve.zero()
    pld_state = (
        state_for_budget(budget.epsilon, budget.delta) if flt.kind is FilterKind.PLD else None
    )
    spent = flt.spend(zero) if pld_state is None else PldFilter(flt).spend(pld_state, zero)
    if lifetime is not None:
        spent = lifetime.spend(zero)
    now = utcnow()
    ds = Dataset(
        id="ds_" + secrets.token_hex(8),
        name=name,
        description=description,
        budget_epsilon=budget.epsilon,
        budget_delta=budget.delta,
        accounting=accounting,
        adaptive=adaptive,
        allowed_mechanisms=allowed_mechanisms,
        filter=flt.kind.value,
        filter_bound=flt.bound,
        filter_params=flt.params_dict(),
        entry_delta_budget=flt.entry_delta,
        created_at=now,
        updated_at=now,
        partition_unit=partition_unit,
        lifetime_budget_epsilon=lifetime.budget.epsilon if lifetime is not None else None,
        lifetime_budget_delta=lifetime.budget.delta if lifetime is not None else None,
        lifetime_filter_bound=lifetime.bound if lifetime is not None else None,
        lifetime_filter_params=(lifetime.params_dict() if lifetime is not None else None),
        lifetime_entry_delta_budget=lifetime.entry_delta if lifetime is not None else 0.0,
    )
    totals = DatasetTotal(
        dataset_id=ds.id,
        **curve_columns(zero),
        entry_count=0,
        mechanism_counts={},
        spent_epsilon=spent.epsilon,
        spent_method=spent.method,
        last_entry_at=None,
        updated_at=now,
        held_count=0,
        held=None,
        held_next_expiry=None,
    )
    try:
        with db.write() as s:
            confirm_active(s, actor)
            if s.scalars(select(Dataset.id).where(Dataset.name == name)).first() is not None:
                raise Conflict(f"a dataset named {name!r} already exists")
            s.add(ds)
            s.flush()
            s.add(totals)
            if pld_state is not None:
                s.add(DatasetPld(dataset_id=ds.id, state=pld_state.to_bytes(), updated_at=now))
            audit.record(
                s,
                actor,
                "dataset.created",
                dataset_id=ds.id,
                details={
                    "name": name,
                    "budget": {"epsilon": budget.epsilon, "delta": budget.delta},
                    "accounting": accounting,
                    "adaptive": adaptive,
                    "allowed_mechanisms": allowed_mechanisms,
                    "filter": flt.kind.value,
                    **({"entry_delta_budget": flt.entry_delta} if flt.entry_delta > 0.0 else {}),
                    **(
                        {"partition": {"unit": partition_unit}}
                        if partition_unit is not None
                        else {}
                    ),
                    **(
                        {
                            "lifetime_budget": {
                                "epsilon": ds.lifetime_budget_epsilon,
                                "delta": ds.lifetime_budget_delta,
                            },
                            **(
                                {"lifetime_entry_delta_budget": lifetime.entry_delta}
                                if lifetime.entry_delta > 0.0
                                else {}
                            ),
                        }
                        if lifetime is not None
                        else {}
                    ),
                },
            )
            s.flush()
            return answers.dataset(state.load(s, ds.id, actor))
    except IntegrityError:
        raise Conflict(f"a dataset named {name!r} already exists") from None


def _structure_filters(
    flt: Filter,
    partition_unit: str | None,
    lifetime_budget: tuple[float, float] | None,
    allowed_mechanisms: list[str] | None = None,
    lifetime_entry_delta: float = 0.0,
) -> Filter | None:
    """Budget structures at creation: 422 for a partition on a ``pld`` dataset or a lifetime
    budget without a partition; the lifetime budget's filter (the dataset's kind; for
    ``rdp_fixed_orders`` an order chosen for the lifetime budget itself, as an allocation's is:
    the block budget's order can leave a smaller lifetime budget unable to admit anything),
    with ``lifetime_entry_delta`` of its delta set aside for entries' own deltas."""
    if partition_unit is not None and flt.kind is FilterKind.PLD:
        raise Unprocessable(
            "'pld' datasets cannot be partitioned (a PLD per block is not kept); use 'rdp' or "
            "'zcdp' accounting for a partitioned dataset"
        )
    if lifetime_budget is None:
        return None
    if partition_unit is None:
        raise Unprocessable(
            "'lifetime_budget' applies only to partitioned datasets (give 'partition'); an "
            "unpartitioned dataset's budget already caps all its charges"
        )
    try:
        return allocation_filter(
            flt.kind,
            _budget(*lifetime_budget),
            allowed_mechanisms=allowed_mechanisms,
            entry_delta=lifetime_entry_delta,
        )
    except ValueError as exc:
        raise Unprocessable(str(exc)) from None


ARCHIVED_FILTERS = ("false", "true", "all")
"""``?archived=``: active datasets only (the default), archived ones only, or all."""


def list_datasets(
    db: Database, caller: Caller, limit: int = 1000, offset: int = 0, archived: str = "false"
) -> r.DatasetList:
    """Datasets visible to the caller with their spend, by name; archived ones only when
    ``archived`` is ``"true"`` (only them) or ``"all"``."""
    if archived not in ARCHIVED_FILTERS:
        raise Unprocessable(f"archived must be one of {list(ARCHIVED_FILTERS)}, got {archived!r}")
    with db.read() as s:
        principal = authenticated(db, caller, s)
        q = state.columns()
        if principal.dataset_ids is not None:
            q = q.where(Dataset.id.in_(principal.dataset_ids))
        if archived == "false":
            q = q.where(Dataset.archived_at.is_(None))
        elif archived == "true":
            q = q.where(Dataset.archived_at.is_not(None))
        total = s.scalar(select(func.count()).select_from(q.subquery())) or 0
        rows = s.execute(q.order_by(Dataset.name).limit(limit).offset(offset)).all()
        items = [answers.dataset(state.state_of(row)) for row in rows]
    return r.DatasetList(datasets=items, total=total)


def get_dataset(db: Database, caller: Caller, ref: str) -> r.Dataset:
    """One dataset with its current spend."""
    with db.read() as s:
        principal = authenticated(db, caller, s)
        return answers.dataset(state.load(s, ref, principal))


def budget_view(db: Database, caller: Caller, ref: str) -> r.BudgetView:
    """``GET /budget``: budget, spent, remaining, exhausted, entries (O(1) in ledger length)."""
    with db.read_core() as conn:  # Core only: no Session (~65 us of CPU per read)
        principal = authenticated(db, caller, conn)
        st = state.load(conn, ref, principal)
        view = answers.budget_view(st)
        if st.partition_unit is not None:  # budget structures: blocks and lifetime
            with Session(conn, expire_on_commit=False) as s:  # the ORM reads in this connection
                view = view.model_copy(update=partitions.summary(s, st))
        return view


def spend_query(
    db: Database, caller: Caller, ref: str, delta: float | None, epsilon: float | None
) -> r.SpendQuery:
    """epsilon at another delta, or delta at an epsilon, under the dataset's filter (the key is
    checked first: a caller without a valid one learns nothing of the request's shape)."""
    with db.read() as s:
        principal = authenticated(db, caller, s)
        if (delta is None) == (epsilon is None):
            raise Unprocessable("give exactly one of the query parameters 'delta' or 'epsilon'")
        st = state.load(s, ref, principal)
        if st.is_pld:
            state.load_pld(s, st)
    f = st.totals_filter  # on a partitioned dataset with a lifetime budget, the lifetime's
    try:
        if delta is not None:
            sp = answers.spend_at(st, delta)
        elif st.pld is not None:  # the PLD the pld dataset reports from
            assert epsilon is not None
            sp = PldFilter(f).spend_delta(st.pld, st.committed, epsilon)
        else:
            assert epsilon is not None
            sp = f.spend_delta(st.committed, epsilon)
    except ValueError as exc:
        raise Unprocessable(str(exc)) from None
    return r.SpendQuery(
        dataset_id=st.id,
        epsilon=answers.finite_or_none(sp.epsilon),
        delta=sp.delta,
        method=sp.method,
        order=sp.order,
        filter=f.kind.value,
        rho=answers.finite_or_none(st.committed.rho),
        conversions={k: v for k, v in sp.candidates.items() if math.isfinite(v)},
        entries=st.entry_count,
    )


_SETTINGS = (
    "name",
    "description",
    "budget",
    "accounting",
    "adaptive",
    "allowed_mechanisms",
    "warning_threshold",
    "lifetime_budget",
    "entry_delta_budget",
    "lifetime_entry_delta_budget",
)


def _settings(ds: Dataset) -> dict[str, Any]:
    return {
        "name": ds.name,
        "description": ds.description,
        "budget": {"epsilon": ds.budget_epsilon, "delta": ds.budget_delta},
        "accounting": ds.accounting,
        "adaptive": ds.adaptive,
        "allowed_mechanisms": ds.allowed_mechanisms,
        "warning_threshold": ds.warning_threshold,
        "lifetime_budget": (
            None
            if ds.lifetime_budget_epsilon is None
            else {"epsilon": ds.lifetime_budget_epsilon, "delta": ds.lifetime_budget_delta}
        ),
        "entry_delta_budget": ds.entry_delta_budget,
        "lifetime_entry_delta_budget": ds.lifetime_entry_delta_budget,
    }


def _budget_action(old: dict[str, float], new: dict[str, float]) -> str:
    if new["epsilon"] >= old["epsilon"] and new["delta"] >= old["delta"]:
        return "budget.raised"
    if new["epsilon"] <= old["epsilon"] and new["delta"] <= old["delta"]:
        return "budget.lowered"
    return "budget.changed"


def _first_use(s: Session, st: state.DatasetState) -> str | None:
    """What the dataset has been used by, "charge" or "reservation" (a hold's mechanism may
    run, its output seen, before it is committed), or None: nothing of its ledger seen yet."""
    if st.entry_count > 0:
        return "charge"
    held = s.scalars(select(Reservation.id).where(Reservation.dataset_id == st.id)).first()
    return "reservation" if held is not None else None


def update_dataset(db: Database, caller: Caller, ref: str, changes: dict[str, Any]) -> r.Dataset:
    """Change budget, name or description (audited with old and new values).

    Changing ``accounting``, ``adaptive``, ``allowed_mechanisms``, ``entry_delta_budget`` or
    ``lifetime_entry_delta_budget`` after the first charge (or while a reservation exists) is
    refused with 409: it would rewrite history. Lowering the budget below the current spend is
    allowed and leaves the dataset exhausted; a budget change keeps the entry delta budgets (422
    if the new delta is not above them). An ``rdp_fixed_orders`` filter keeps its order from
    the first charge or hold on; before, a change chooses it for the new settings.
    """
    actor = authenticated(db, caller)
    if (why := actor.may_change_budgets()) is not None:
        raise Forbidden(why)
    with db.write() as s:
        with admission.locked(s, ref, actor) as st:
            ds = s.get(Dataset, st.id)
            assert ds is not None
            old = _settings(ds)
            rules = {
                k
                for k in (
                    "accounting",
                    "adaptive",
                    "allowed_mechanisms",
                    "entry_delta_budget",
                    "lifetime_entry_delta_budget",
                )
                if k in changes
            }
            rules = {k for k in rules if changes[k] != getattr(ds, k)}
            seen = _first_use(s, st)
            if rules and seen is not None:
                raise Conflict(
                    f"cannot change {', '.join(sorted(rules))} after the first {seen}: it "
                    "would rewrite the ledger's history; create a new dataset instead"
                )
            if "name" in changes and changes["name"] != ds.name:
                clash = s.scalars(
                    select(Dataset.id).where(Dataset.name == changes["name"], Dataset.id != ds.id)
                ).first()
                if clash is not None:
                    raise Conflict(f"a dataset named {changes['name']!r} already exists")
                ds.name = changes["name"]
                try:
                    s.flush()
                except IntegrityError:  # PostgreSQL: a concurrent rename took it after our check
                    raise Conflict(f"a dataset named {changes['name']!r} already exists") from None
            if "description" in changes:
                ds.description = changes["description"]
            if "warning_threshold" in changes:
                threshold = float(changes["warning_threshold"])
                if not 0.0 < threshold <= 1.0:
                    raise Unprocessable(f"warning_threshold must be in (0, 1], got {threshold}")
                ds.warning_threshold = threshold
            budget_in = changes.get("budget") or {}
            budget = _budget(
                budget_in.get("epsilon", ds.budget_epsilon), budget_in.get("delta", ds.budget_delta)
            )
            allowed = changes.get("allowed_mechanisms", ds.allowed_mechanisms)
            if allowed is not None:
                allowed = sorted(set(allowed))
            flt = _filter(
                changes.get("accounting", ds.accounting),
                changes.get("adaptive", ds.adaptive),
                allowed,
                budget,
                keep=st.filter if seen is not None else None,
                entry_delta=changes.get("entry_delta_budget", ds.entry_delta_budget),
            )
            ds.entry_delta_budget = flt.entry_delta
            ds.budget_epsilon, ds.budget_delta = budget.epsilon, budget.delta
            ds.accounting = changes.get("accounting", ds.accounting)
            ds.adaptive = changes.get("adaptive", ds.adaptive)
            ds.allowed_mechanisms = allowed
            ds.filter, ds.filter_bound = flt.kind.value, flt.bound
            ds.filter_params = flt.params_dict()
            ds.updated_at = utcnow()
            st.filter = flt
            life_split = changes.get("lifetime_entry_delta_budget")
            if rules:
                _refilter_structures(s, ds, st, allowed, life_split)
            if "lifetime_budget" in changes:
                _set_lifetime(ds, st, changes["lifetime_budget"], life_split, seen is not None)
            _splits_agree(flt.entry_delta, st.lifetime, life_split or 0.0)
            if flt.kind is FilterKind.PLD:
                if st.pld is None:  # a rule change before the first charge: a fresh state
                    st.pld = state_for_budget(budget.epsilon, budget.delta)
                    s.merge(
                        DatasetPld(dataset_id=st.id, state=st.pld.to_bytes(), updated_at=utcnow())
                    )
                st.spent = PldFilter(flt).spend(st.pld, st.committed)
            else:
                st.spent = admission.totals_filter_spend(st, st.committed)
            if st.partition_unit is not None and "budget" in changes:
                partitions.rebudget(s, st, BLOCK, st.id, flt)  # each block's spend, new delta
            st.dirty = True
            new = _settings(ds)
            changed = {k: {"old": old[k], "new": new[k]} for k in _SETTINGS if old[k] != new[k]}
            if changed:
                action = "dataset.changed"
                if "budget" in changed:
                    action = _budget_action(old["budget"], new["budget"])
                audit.record(
                    s,
                    actor,
                    action,
                    dataset_id=ds.id,
                    details={"changes": changed, "spent_epsilon": st.spent.epsilon},
                )
        s.flush()
        return answers.dataset(state.load(s, st.id, actor))


def _refilter_structures(
    s: Session,
    ds: Dataset,
    st: state.DatasetState,
    allowed: list[str] | None,
    life_split: float | None = None,
) -> None:
    """New rules (accounting, adaptive, allowed kinds; only before the first charge or hold):
    the allocations' and the lifetime budget's filters are made again with the dataset's new
    kind, and for ``rdp_fixed_orders`` with orders chosen for their own budgets and the new
    allowed kinds (no ledger has been seen, so choosing them again is sound). Kept as they
    were, a filter of the old kind answered 500 (fixed orders missing) or named one rule while
    applying another. ``pld`` keeps neither allocations nor time blocks: 422. ``life_split``:
    the lifetime budget's new split of its delta (None: it keeps its own)."""
    kind = st.filter.kind
    rows = s.scalars(select(Allocation).where(Allocation.dataset_id == st.id)).all()
    if kind is FilterKind.PLD and (rows or st.partition_unit is not None):
        has = "allocations" if rows else "time blocks (a partition)"
        raise Unprocessable(
            f"dataset {st.name!r} has {has}, which 'pld' accounting does not keep (a PLD per "
            "allocation or block is not kept); use 'rdp' or 'zcdp' accounting"
        )
    try:
        for row in rows:
            flt = allocation_filter(
                kind,
                Budget(row.budget_epsilon, row.budget_delta),
                None,
                allowed,
                row.entry_delta_budget,  # kept: 422 if the new rule sets nothing aside
            )
            row.filter_bound = flt.bound
            row.filter_params = flt.params_dict()
            for column, value in zero_totals(flt).items():
                setattr(row, column, value)
        if st.lifetime is not None:
            split = st.lifetime.entry_delta if life_split is None else life_split
            _store_lifetime(
                ds, st, allocation_filter(kind, st.lifetime.budget, None, allowed, split)
            )
    except ValueError as exc:
        raise Unprocessable(str(exc)) from None


def _set_lifetime(
    ds: Dataset,
    st: state.DatasetState,
    change: dict[str, float],
    split: float | None = None,
    seen: bool = True,
) -> None:
    """Set or change a partitioned dataset's lifetime budget (under the dataset's lock). A
    changed budget keeps its filter's fixed orders once the dataset was charged or held
    (``seen``), as a dataset's budget change does; before, and for a new one, the order is chosen
    for it (only its budget and the allowed kinds decide, not the ledger). Lowering it below
    the spend is allowed and leaves the dataset exhausted. ``split``: its part of the delta for
    entries' own deltas (None: the one it has, 0 for a new one)."""
    if st.partition_unit is None:
        raise Unprocessable(
            "'lifetime_budget' applies only to partitioned datasets; an unpartitioned "
            "dataset's budget already caps all its charges"
        )
    old = st.lifetime
    if old is None and set(change) != {"epsilon", "delta"}:
        raise Unprocessable("a new lifetime_budget needs both epsilon and delta")
    epsilon = change.get("epsilon", old.budget.epsilon if old is not None else 0.0)
    delta = change.get("delta", old.budget.delta if old is not None else 0.0)
    budget = _budget(epsilon, delta)
    try:
        if split is None and old is not None:
            split = old.entry_delta
        kept = old if seen else None
        flt = allocation_filter(st.filter.kind, budget, kept, st.allowed_mechanisms, split)
    except ValueError as exc:
        raise Unprocessable(str(exc)) from None
    ds.lifetime_budget_epsilon, ds.lifetime_budget_delta = budget.epsilon, budget.delta
    _store_lifetime(ds, st, flt)


def _store_lifetime(ds: Dataset, st: state.DatasetState, flt: Filter) -> None:
    """``flt`` becomes the lifetime budget's filter: its row columns and the state's."""
    ds.lifetime_entry_delta_budget = flt.entry_delta
    ds.lifetime_filter_bound = flt.bound
    ds.lifetime_filter_params = flt.params_dict()
    st.lifetime = flt


def set_archived(db: Database, caller: Caller, ref: str, archived: bool) -> r.Dataset:
    """Archive (or unarchive) a dataset, under its lock so that no charge races it; audited.
    Idempotent: archiving an archived dataset (or unarchiving an active one) changes nothing
    and answers the dataset as it is."""
    actor = authenticated(db, caller)
    if (why := actor.may_change_budgets()) is not None:
        raise Forbidden(why)
    with db.write() as s:
        with admission.locked(s, ref, actor) as st:
            if (st.archived_at is not None) != archived:
                ds = s.get(Dataset, st.id)
                assert ds is not None
                now = utcnow()
                ds.archived_at = now if archived else None
                ds.updated_at = now
                audit.record(
                    s,
                    actor,
                    "dataset.archived" if archived else "dataset.unarchived",
                    dataset_id=st.id,
                    details={"name": st.name, "spent_epsilon": st.spent.epsilon},
                )
        s.flush()
        return answers.dataset(state.load(s, st.id, actor))


__all__ = [
    "budget_view",
    "create_dataset",
    "get_dataset",
    "list_datasets",
    "set_archived",
    "spend_query",
    "update_dataset",
]
