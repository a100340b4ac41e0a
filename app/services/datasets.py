"""Datasets: create, list, read (with current spend), change budget/description, spend queries.

Reads never touch ledger rows: the spend comes from the ``dataset_total`` row (O(1)).
"""

from __future__ import annotations

import math
import secrets
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.accounting.curve import PrivacyCurve
from app.accounting.filters import Budget, FilterKind, filter_bound, filter_kind, spend, spend_delta
from app.accounting.mechanisms import MECHANISMS
from app.accounting.orders import ORDERS_VERSION
from app.db.engine import Database
from app.db.models import Dataset, DatasetTotal, Reservation, utcnow
from app.services import audit
from app.services.curves import (
    budget_json,
    curve_of,
    exhausted,
    finite_or_none,
    iso,
    rdp_to_bytes,
    remaining_json,
    spend_of,
    spent_json,
)
from app.services.errors import Conflict, Forbidden, NotFound, Unprocessable
from app.services.keys import Principal


@dataclass
class DatasetState:
    """A dataset row with its totals row and composed curve (inside a transaction)."""

    dataset: Dataset
    totals: DatasetTotal
    curve: PrivacyCurve


def find_dataset(
    session: Session, ref: str, principal: Principal, *, lock: bool = False
) -> DatasetState:
    """Resolve a dataset by id (or by unique name) visible to ``principal``; ``lock`` takes the
    totals row lock (``SELECT ... FOR UPDATE`` on PostgreSQL) that serialises charges.

    A scoped key asking for a dataset outside its scope gets the same 404 as for a missing one.
    """
    if lock:
        # lock the totals row first, then read the dataset in a later statement, so that a
        # concurrent budget change (which takes the same lock) is always seen
        totals = session.scalars(
            select(DatasetTotal).where(DatasetTotal.dataset_id == ref).with_for_update()
        ).first()
        if totals is None:
            dataset_id = session.scalars(select(Dataset.id).where(Dataset.name == ref)).first()
            if dataset_id is not None:
                totals = session.scalars(
                    select(DatasetTotal)
                    .where(DatasetTotal.dataset_id == dataset_id)
                    .with_for_update()
                ).first()
        if totals is None or not principal.can_see(totals.dataset_id):
            raise NotFound(f"no dataset {ref!r}")
        ds = session.get(Dataset, totals.dataset_id)
        assert ds is not None
        return DatasetState(dataset=ds, totals=totals, curve=curve_of(totals))
    row = session.execute(
        select(Dataset, DatasetTotal).join(DatasetTotal).where(Dataset.id == ref)
    ).first()
    if row is None:
        row = session.execute(
            select(Dataset, DatasetTotal).join(DatasetTotal).where(Dataset.name == ref)
        ).first()
    if row is None or not principal.can_see(row[0].id):
        raise NotFound(f"no dataset {ref!r}")
    return DatasetState(dataset=row[0], totals=row[1], curve=curve_of(row[1]))


def dataset_json(state: DatasetState, reserved: PrivacyCurve | None = None) -> dict[str, Any]:
    """The public view of a dataset with its current spend."""
    ds, t, curve = state.dataset, state.totals, state.curve
    from app.accounting.filters import Spend

    spent = spent_json(ds, curve, Spend(t.spent_epsilon, ds.budget_delta, t.spent_method))
    out: dict[str, Any] = {
        "id": ds.id,
        "name": ds.name,
        "description": ds.description,
        "budget": budget_json(ds),
        "accounting": ds.accounting,
        "adaptive": ds.adaptive,
        "allowed_mechanisms": ds.allowed_mechanisms,
        "filter": ds.filter,
        "filter_bound": {"rho": ds.filter_bound} if ds.filter_bound is not None else None,
        "spent": spent,
        "remaining": remaining_json(ds, curve, t.spent_epsilon),
        "exhausted": exhausted(ds, curve, t.spent_epsilon),
        "entries": t.entry_count,
        "mechanism_counts": t.mechanism_counts,
        "created_at": iso(ds.created_at),
        "updated_at": iso(ds.updated_at),
        "last_entry_at": iso(t.last_entry_at),
    }
    return out


def _validate_settings(
    accounting: str, adaptive: bool, allowed: list[str] | None, budget: Budget
) -> tuple[FilterKind, float | None]:
    if allowed is not None:
        unknown = sorted(set(allowed) - set(MECHANISMS))
        if unknown:
            raise Unprocessable(
                f"allowed_mechanisms has unknown kinds {unknown}; known: {sorted(MECHANISMS)}"
            )
        if not allowed:
            raise Unprocessable("allowed_mechanisms must be null (all) or a non-empty list")
    kind = filter_kind(accounting, adaptive, allowed)
    return kind, filter_bound(kind, budget)


def _reset_totals(t: DatasetTotal, ds: Dataset) -> None:
    zero = PrivacyCurve.zero()
    s = spend_of(ds, zero)
    t.orders_version = ORDERS_VERSION
    t.rho = zero.rho
    t.rdp = rdp_to_bytes(zero.rdp)
    t.pure_eps = zero.pure_eps
    t.gaussian_only = zero.gaussian_only
    t.entry_count = 0
    t.mechanism_counts = {}
    t.spent_epsilon = s.epsilon
    t.spent_method = s.method
    t.last_entry_at = None
    t.updated_at = utcnow()


def create_dataset(
    db: Database,
    actor: Principal,
    *,
    name: str,
    budget_epsilon: float,
    budget_delta: float,
    accounting: str = "rdp",
    adaptive: bool = True,
    allowed_mechanisms: list[str] | None = None,
    description: str | None = None,
) -> dict[str, Any]:
    """Create a dataset with an empty ledger; its filter is fixed here (audited). A key scoped
    to datasets cannot create one (403): it could neither see it nor be given it."""
    if actor.dataset_ids is not None:
        raise Forbidden(
            "a key scoped to datasets cannot create datasets; use an unscoped admin key"
        )
    try:
        budget = Budget(budget_epsilon, budget_delta)
    except ValueError as exc:
        raise Unprocessable(str(exc)) from None
    if allowed_mechanisms is not None:
        allowed_mechanisms = sorted(set(allowed_mechanisms))
    kind, bound = _validate_settings(accounting, adaptive, allowed_mechanisms, budget)
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
        filter=kind.value,
        filter_bound=bound,
        created_at=now,
        updated_at=now,
    )
    totals = DatasetTotal(dataset_id=ds.id)
    _reset_totals(totals, ds)
    try:
        with db.write() as s:
            if s.scalars(select(Dataset.id).where(Dataset.name == name)).first() is not None:
                raise Conflict(f"a dataset named {name!r} already exists")
            s.add(ds)
            s.flush()
            s.add(totals)
            audit.record(
                s,
                actor,
                "dataset.created",
                dataset_id=ds.id,
                details={
                    "name": name,
                    "budget": budget_json(ds),
                    "accounting": accounting,
                    "adaptive": adaptive,
                    "allowed_mechanisms": allowed_mechanisms,
                    "filter": kind.value,
                },
            )
            s.flush()
            return dataset_json(DatasetState(ds, totals, curve_of(totals)))
    except IntegrityError:
        raise Conflict(f"a dataset named {name!r} already exists") from None


def list_datasets(
    db: Database, principal: Principal, limit: int = 1000, offset: int = 0
) -> dict[str, Any]:
    """Datasets visible to ``principal`` with their spend, by name."""
    with db.read() as s:
        q = select(Dataset, DatasetTotal).join(DatasetTotal, DatasetTotal.dataset_id == Dataset.id)
        if principal.dataset_ids is not None:
            q = q.where(Dataset.id.in_(principal.dataset_ids))
        total = s.scalar(select(func.count()).select_from(q.subquery())) or 0
        rows = s.execute(q.order_by(Dataset.name).limit(limit).offset(offset)).all()
        items = [dataset_json(DatasetState(ds, t, curve_of(t))) for ds, t in rows]
    return {"datasets": items, "total": total}


def get_dataset(db: Database, principal: Principal, ref: str) -> dict[str, Any]:
    """One dataset with its current spend."""
    with db.read() as s:
        return dataset_json(find_dataset(s, ref, principal))


def budget_view(db: Database, principal: Principal, ref: str) -> dict[str, Any]:
    """``GET /budget``: budget, spent, remaining, exhausted, entries (O(1) in ledger length)."""
    with db.read() as s:
        st = find_dataset(s, ref, principal)
        view = dataset_json(st)
        held = active_reservations_curve(s, st.dataset.id)
    reserved = None
    if held is not None:
        reserved = {"rho": finite_or_none(held[0].rho), "count": held[1]}
    return {
        "dataset_id": view["id"],
        "name": view["name"],
        "budget": view["budget"],
        "spent": view["spent"],
        "remaining": view["remaining"],
        "exhausted": view["exhausted"],
        "entries": view["entries"],
        "filter": view["filter"],
        "accounting": view["accounting"],
        "adaptive": view["adaptive"],
        "reserved": reserved,
    }


def active_reservations_curve(session: Session, dataset_id: str) -> tuple[PrivacyCurve, int] | None:
    """Sum of the curves of active (not yet resolved) reservations, or None when there are none.

    Expired but unresolved reservations are included: an expired hold is charged, never freed.
    """
    rows = session.scalars(
        select(Reservation).where(
            Reservation.dataset_id == dataset_id, Reservation.status == "active"
        )
    ).all()
    if not rows:
        return None
    total = PrivacyCurve.zero()
    for r in rows:
        total = total + curve_of(r)
    return total, len(rows)


def spend_query(
    db: Database, principal: Principal, ref: str, delta: float | None, epsilon: float | None
) -> dict[str, Any]:
    """epsilon at another delta, or delta at an epsilon, under the dataset's filter."""
    if (delta is None) == (epsilon is None):
        raise Unprocessable("give exactly one of the query parameters 'delta' or 'epsilon'")
    with db.read() as s:
        st = find_dataset(s, ref, principal)
    kind = FilterKind(st.dataset.filter)
    try:
        if delta is not None and delta == st.dataset.budget_delta:
            r = spend_of(st.dataset, st.curve)
        elif delta is not None:
            r = spend(kind, st.curve, delta)
        else:
            assert epsilon is not None
            r = spend_delta(kind, st.curve, epsilon)
    except ValueError as exc:
        raise Unprocessable(str(exc)) from None
    return {
        "dataset_id": st.dataset.id,
        "epsilon": r.epsilon,
        "delta": r.delta,
        "method": r.method,
        "order": r.order,
        "filter": kind.value,
        "rho": finite_or_none(st.curve.rho),
        "conversions": {k: v for k, v in r.candidates.items() if math.isfinite(v)},
        "entries": st.totals.entry_count,
    }


def update_dataset(
    db: Database, actor: Principal, ref: str, changes: dict[str, Any]
) -> dict[str, Any]:
    """Change budget or description (audited with old and new values).

    Changing ``accounting``, ``adaptive`` or ``allowed_mechanisms`` after the first charge (or
    while a reservation exists) is refused with 409: it would rewrite history. Lowering the
    budget below the current spend is allowed and leaves the dataset exhausted.
    """
    with db.write() as s:
        st = find_dataset(s, ref, actor, lock=True)
        ds, t = st.dataset, st.totals
        old = {
            "name": ds.name,
            "description": ds.description,
            "budget": budget_json(ds),
            "accounting": ds.accounting,
            "adaptive": ds.adaptive,
            "allowed_mechanisms": ds.allowed_mechanisms,
        }
        rules = {k for k in ("accounting", "adaptive", "allowed_mechanisms") if k in changes}
        rules = {k for k in rules if changes[k] != getattr(ds, k)}
        if rules:
            has_reservations = s.scalars(
                select(Reservation.id).where(Reservation.dataset_id == ds.id)
            ).first()
            if t.entry_count > 0 or has_reservations is not None:
                raise Conflict(
                    f"cannot change {sorted(rules)} after the first charge: it would rewrite "
                    "the ledger's history; create a new dataset instead"
                )
        if "name" in changes and changes["name"] != ds.name:
            clash = s.scalars(
                select(Dataset.id).where(Dataset.name == changes["name"], Dataset.id != ds.id)
            ).first()
            if clash is not None:
                raise Conflict(f"a dataset named {changes['name']!r} already exists")
            ds.name = changes["name"]
        if "description" in changes:
            ds.description = changes["description"]
        budget_in = changes.get("budget") or {}
        eps = budget_in.get("epsilon", ds.budget_epsilon)
        dlt = budget_in.get("delta", ds.budget_delta)
        try:
            budget = Budget(eps, dlt)
        except ValueError as exc:
            raise Unprocessable(str(exc)) from None
        accounting = changes.get("accounting", ds.accounting)
        adaptive = changes.get("adaptive", ds.adaptive)
        allowed = changes.get("allowed_mechanisms", ds.allowed_mechanisms)
        if allowed is not None:
            allowed = sorted(set(allowed))
        kind, bound = _validate_settings(accounting, adaptive, allowed, budget)
        ds.budget_epsilon, ds.budget_delta = budget.epsilon, budget.delta
        ds.accounting, ds.adaptive, ds.allowed_mechanisms = accounting, adaptive, allowed
        ds.filter, ds.filter_bound = kind.value, bound
        ds.updated_at = utcnow()
        sp = spend_of(ds, st.curve)
        t.spent_epsilon, t.spent_method = sp.epsilon, sp.method
        new = {
            "name": ds.name,
            "description": ds.description,
            "budget": budget_json(ds),
            "accounting": ds.accounting,
            "adaptive": ds.adaptive,
            "allowed_mechanisms": ds.allowed_mechanisms,
        }
        changed = {k: {"old": old[k], "new": new[k]} for k in old if old[k] != new[k]}
        if changed:
            action = "dataset.changed"
            if "budget" in changed:
                ob, nb = old["budget"], new["budget"]
                assert isinstance(ob, dict) and isinstance(nb, dict)
                raised = nb["epsilon"] >= ob["epsilon"] and nb["delta"] >= ob["delta"]
                lowered = nb["epsilon"] <= ob["epsilon"] and nb["delta"] <= ob["delta"]
                action = (
                    "budget.raised" if raised else "budget.lowered" if lowered else "budget.changed"
                )
            audit.record(
                s,
                actor,
                action,
                dataset_id=ds.id,
                details={"changes": changed, "spent_epsilon": t.spent_epsilon},
            )
        name = ds.name  # read before the flush: a failed flush expires the row
        try:
            s.flush()
        except IntegrityError:  # PostgreSQL: a concurrent rename took the name after our check
            raise Conflict(f"a dataset named {name!r} already exists") from None
        return dataset_json(st)


__all__ = [
    "DatasetState",
    "active_reservations_curve",
    "budget_view",
    "create_dataset",
    "dataset_json",
    "find_dataset",
    "get_dataset",
    "list_datasets",
    "spend_query",
    "update_dataset",
]
