"""The charge path: one transaction that locks the dataset's totals, dry-runs the new curve
against the filter (with active reservations counted as spent), and either appends a ledger
entry and updates the totals, or records a rejection. Retries with the same Idempotency-Key
return the first answer.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.accounting.curve import PrivacyCurve
from app.accounting.filters import Budget, FilterKind, admits, spend
from app.accounting.mechanisms import Mechanism
from app.accounting.orders import ORDERS_VERSION
from app.db.engine import Database
from app.db.models import IdempotencyRecord, LedgerEntry, Rejection, utcnow
from app.services.curves import (
    budget_json,
    finite_or_none,
    iso,
    rdp_to_bytes,
    request_hash,
    spent_json,
)
from app.services.datasets import DatasetState, active_reservations_curve, find_dataset
from app.services.errors import BudgetExceeded, Unprocessable
from app.services.keys import Principal


def curve_for(mechanism: Mechanism) -> PrivacyCurve:
    """The mechanism's curve, or 422 when its parameters overflow."""
    try:
        return mechanism.curve()
    except ValueError as exc:
        raise Unprocessable(str(exc)) from None


def check_allowed(st: DatasetState, mechanism: Mechanism) -> None:
    allowed = st.dataset.allowed_mechanisms
    if allowed is not None and mechanism.kind not in allowed:
        raise Unprocessable(
            f"mechanism {mechanism.kind!r} is not allowed on dataset {st.dataset.name!r} "
            f"(allowed: {', '.join(allowed)})",
            allowed_mechanisms=allowed,
        )


def requested_json(
    st: DatasetState, mechanism_json: dict[str, Any], curve: PrivacyCurve
) -> dict[str, Any]:
    """What a charge asks for: the mechanism and its cost alone at the budget delta."""
    alone = spend(FilterKind(st.dataset.filter), curve, st.dataset.budget_delta)
    return {
        "mechanism": mechanism_json,
        "rho": finite_or_none(curve.rho),
        "pure_epsilon": finite_or_none(curve.pure_eps),
        "epsilon": alone.epsilon,
    }


def entry_json(e: LedgerEntry) -> dict[str, Any]:
    """The public view of a ledger entry."""
    return {
        "id": e.id,
        "dataset_id": e.dataset_id,
        "seq": e.seq,
        "created_at": iso(e.created_at),
        "mechanism": e.mechanism,
        "kind": e.kind,
        "count": e.count,
        "label": e.label,
        "metadata": e.metadata_,
        "rho": finite_or_none(e.rho),
        "pure_epsilon": finite_or_none(e.pure_eps),
        "spent_epsilon": e.spent_epsilon,
        "source": e.source,
        "key_id": e.key_id,
        "reservation_id": e.reservation_id,
    }


def admission(st: DatasetState, session: Session, curve: PrivacyCurve) -> tuple[bool, PrivacyCurve]:
    """(admitted?, committed curve after the charge). Active reservations count as spent."""
    ds = st.dataset
    after = st.curve + curve
    held = active_reservations_curve(session, ds.id)
    with_holds = after if held is None else after + held[0]
    kind = FilterKind(ds.filter)
    ok = admits(kind, Budget(ds.budget_epsilon, ds.budget_delta), with_holds, ds.filter_bound)
    return ok, after


def append_entry(
    session: Session,
    st: DatasetState,
    *,
    mechanism: Mechanism,
    mechanism_json: dict[str, Any],
    curve: PrivacyCurve,
    after: PrivacyCurve,
    label: str | None,
    metadata: dict[str, Any] | None,
    key_id: str | None,
    source: str = "charge",
    reservation_id: str | None = None,
    now: datetime | None = None,
) -> LedgerEntry:
    """Insert a ledger entry and update the totals row (caller holds the lock)."""
    ds, t = st.dataset, st.totals
    now = now or utcnow()
    sp = spend(FilterKind(ds.filter), after, ds.budget_delta)
    entry = LedgerEntry(
        dataset_id=ds.id,
        seq=t.entry_count + 1,
        created_at=now,
        kind=mechanism.kind,
        mechanism={**mechanism_json, "v": 1},
        count=mechanism.count,
        rho=curve.rho,
        rdp=rdp_to_bytes(curve.rdp),
        pure_eps=curve.pure_eps,
        gaussian_only=curve.gaussian_only,
        orders_version=ORDERS_VERSION,
        label=label,
        metadata_=metadata,
        key_id=key_id,
        source=source,
        reservation_id=reservation_id,
        spent_epsilon=sp.epsilon,
    )
    session.add(entry)
    counts = dict(t.mechanism_counts or {})
    c = dict(counts.get(mechanism.kind) or {"entries": 0, "count": 0, "rho": 0.0})
    c["entries"] += 1
    c["count"] += mechanism.count
    c["rho"] = c["rho"] + curve.rho if math.isfinite(curve.rho) else None
    counts[mechanism.kind] = c
    t.rho = after.rho
    t.rdp = rdp_to_bytes(after.rdp)
    t.pure_eps = after.pure_eps
    t.gaussian_only = after.gaussian_only
    t.entry_count = t.entry_count + 1
    t.mechanism_counts = counts
    t.spent_epsilon = sp.epsilon
    t.spent_method = sp.method
    t.last_entry_at = now
    t.updated_at = now
    st.curve = after
    session.flush()
    return entry


def current_spent(st: DatasetState) -> dict[str, Any]:
    from app.accounting.filters import Spend

    t = st.totals
    return spent_json(
        st.dataset, st.curve, Spend(t.spent_epsilon, st.dataset.budget_delta, t.spent_method)
    )


def charge(
    db: Database,
    principal: Principal,
    ref: str,
    *,
    mechanism: Mechanism,
    mechanism_json: dict[str, Any],
    label: str | None = None,
    metadata: dict[str, Any] | None = None,
    idempotency_key: str | None = None,
    dry_run: bool = False,
) -> tuple[int, dict[str, Any]]:
    """Charge ``mechanism`` to dataset ``ref``: (201, {"entry", "spent"}), or BudgetExceeded (409)
    after recording the rejection. With ``dry_run``: (200, answer) or 409, nothing recorded.
    Returns (status, body); a replayed Idempotency-Key returns the stored first answer.
    """
    curve = curve_for(mechanism)
    req_hash = request_hash({"mechanism": mechanism_json, "label": label, "metadata": metadata})
    refusal: BudgetExceeded | None = None
    with db.write() as s:
        st = find_dataset(s, ref, principal, lock=True)
        if idempotency_key is not None and not dry_run:
            rec = s.scalars(
                select(IdempotencyRecord).where(
                    IdempotencyRecord.dataset_id == st.dataset.id,
                    IdempotencyRecord.key == idempotency_key,
                )
            ).first()
            if rec is not None:
                if rec.request_hash != req_hash:
                    raise Unprocessable(
                        "this Idempotency-Key was already used with a different request body",
                        idempotency_key=idempotency_key,
                    )
                if rec.status_code >= 400:
                    raise BudgetExceeded(
                        rec.response.get("detail", "over budget"),
                        **{k: v for k, v in rec.response.items() if k not in _PROBLEM_KEYS},
                    )
                return rec.status_code, rec.response
        check_allowed(st, mechanism)
        from app.services.reservations import expire_due

        expire_due(s, st)
        ok, after = admission(st, s, curve)
        requested = requested_json(st, mechanism_json, curve)
        if dry_run:
            would = spent_json(
                st.dataset,
                after,
                spend(FilterKind(st.dataset.filter), after, st.dataset.budget_delta),
            )
            if not ok:
                raise _refusal(st, requested, would, dry_run=True)
            return 200, {
                "admitted": True,
                "dry_run": True,
                "spent": current_spent(st),
                "would_spend": would,
                "requested": requested,
            }
        if not ok:
            would = spent_json(
                st.dataset,
                after,
                spend(FilterKind(st.dataset.filter), after, st.dataset.budget_delta),
            )
            refusal = _refusal(st, requested, would, dry_run=False)
            s.add(
                Rejection(
                    dataset_id=st.dataset.id,
                    created_at=utcnow(),
                    operation="charge",
                    mechanism=mechanism_json,
                    label=label,
                    metadata_=metadata,
                    key_id=principal.key_id,
                    reason=refusal.detail,
                    spent=refusal.extra["spent"],
                    requested=requested,
                    budget=budget_json(st.dataset),
                )
            )
            if idempotency_key is not None:
                s.add(
                    IdempotencyRecord(
                        dataset_id=st.dataset.id,
                        key=idempotency_key,
                        request_hash=req_hash,
                        status_code=409,
                        response=refusal.to_problem(),
                        created_at=utcnow(),
                    )
                )
        else:
            entry = append_entry(
                s,
                st,
                mechanism=mechanism,
                mechanism_json=mechanism_json,
                curve=curve,
                after=after,
                label=label,
                metadata=metadata,
                key_id=principal.key_id,
            )
            body = {"entry": entry_json(entry), "spent": current_spent(st)}
            if idempotency_key is not None:
                s.add(
                    IdempotencyRecord(
                        dataset_id=st.dataset.id,
                        key=idempotency_key,
                        request_hash=req_hash,
                        status_code=201,
                        response=body,
                        created_at=utcnow(),
                    )
                )
    if refusal is not None:
        raise refusal
    return 201, body


_PROBLEM_KEYS = {"type", "title", "status", "detail"}


def _refusal(
    st: DatasetState, requested: dict[str, Any], would: dict[str, Any], *, dry_run: bool
) -> BudgetExceeded:
    ds = st.dataset
    if FilterKind(ds.filter) in (FilterKind.GDP, FilterKind.ZCDP, FilterKind.ZCDP_FILTER):
        detail = (
            f"charge refused: rho would reach {would['rho']:.6g} (incl. active reservations), "
            f"above the {ds.filter} filter's bound {ds.filter_bound:.6g} for budget "
            f"(epsilon={ds.budget_epsilon:g}, delta={ds.budget_delta:g})"
        )
    else:
        detail = (
            f"charge refused: epsilon at delta={ds.budget_delta:g} would reach "
            f"{would['epsilon']:.6g} (incl. active reservations), above the budget "
            f"{ds.budget_epsilon:g} ({ds.filter} filter)"
        )
    return BudgetExceeded(
        detail,
        dataset_id=ds.id,
        spent=current_spent(st),
        budget=budget_json(ds),
        requested=requested,
        would_spend=would,
        dry_run=dry_run,
    )


__all__ = ["admission", "append_entry", "charge", "check_allowed", "curve_for", "entry_json"]
