"""Two-phase charging: hold budget before running, then commit into the ledger or release.

* ``reserve``: admitted like a charge (active holds count as spent); 409 when it does not fit.
* ``commit``: turns the hold into a ledger entry (source ``reservation``). Idempotent.
* ``release``: frees the hold; the pipeline asserts that no output was released. Idempotent.
* Expiry fails closed: a hold past its ``expires_at`` is charged into the ledger (source
  ``reservation_expired``) and audited, never silently freed. Expiry happens lazily inside
  every write transaction on the dataset and in the periodic sweeper.

Every transition happens under the dataset's totals lock, so racing commit / release / expiry
resolve to exactly one outcome.
"""

from __future__ import annotations

import secrets
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.accounting.filters import FilterKind, spend
from app.accounting.mechanisms import Mechanism, mechanism_from_dict
from app.accounting.orders import ORDERS_VERSION
from app.db.engine import Database
from app.db.models import Rejection, Reservation, utcnow
from app.services import audit
from app.services.curves import budget_json, curve_of, finite_or_none, iso, rdp_to_bytes, spent_json
from app.services.datasets import DatasetState, find_dataset
from app.services.errors import Conflict, NotFound, Unprocessable
from app.services.keys import SYSTEM, Principal


def _aware(ts: datetime) -> datetime:
    from datetime import UTC

    return ts if ts.tzinfo is not None else ts.replace(tzinfo=UTC)


def reservation_json(r: Reservation) -> dict[str, Any]:
    return {
        "id": r.id,
        "dataset_id": r.dataset_id,
        "status": r.status,
        "mechanism": r.mechanism,
        "label": r.label,
        "metadata": r.metadata_,
        "rho": finite_or_none(r.rho),
        "pure_epsilon": finite_or_none(r.pure_eps),
        "created_at": iso(r.created_at),
        "expires_at": iso(r.expires_at),
        "resolved_at": iso(r.resolved_at),
        "ledger_entry_id": r.ledger_entry_id,
        "key_id": r.key_id,
    }


def _charge_reservation(
    session: Session, st: DatasetState, r: Reservation, source: str, now: datetime
) -> int:
    from app.services.charges import append_entry

    mech = mechanism_from_dict(r.mechanism)
    curve = curve_of(r)
    entry = append_entry(
        session,
        st,
        mechanism=mech,
        mechanism_json={k: v for k, v in r.mechanism.items() if k != "v"},
        curve=curve,
        after=st.curve + curve,
        label=r.label,
        metadata=r.metadata_,
        key_id=r.key_id,
        source=source,
        reservation_id=r.id,
        now=now,
    )
    return entry.id


def expire_due(session: Session, st: DatasetState, now: datetime | None = None) -> int:
    """Charge every active reservation of the locked dataset whose TTL has passed."""
    now = now or utcnow()
    rows = session.scalars(
        select(Reservation)
        .where(Reservation.dataset_id == st.dataset.id, Reservation.status == "active")
        .order_by(Reservation.created_at)
    ).all()
    n = 0
    for r in rows:
        if _aware(r.expires_at) <= now:
            r.status = "expired"
            r.resolved_at = now
            r.resolved_by = None
            # the hold is released from the active set before charging it
            session.flush()
            r.ledger_entry_id = _charge_reservation(session, st, r, "reservation_expired", now)
            audit.record(
                session,
                SYSTEM,
                "reservation.expired",
                dataset_id=st.dataset.id,
                target_id=r.id,
                details={"ledger_entry_id": r.ledger_entry_id, "mechanism": r.mechanism},
            )
            n += 1
    return n


def reserve(
    db: Database,
    principal: Principal,
    ref: str,
    *,
    mechanism: Mechanism,
    mechanism_json: dict[str, Any],
    ttl_seconds: int,
    label: str | None,
    metadata: dict[str, Any] | None,
    max_ttl_seconds: int,
) -> dict[str, Any]:
    """Hold budget for a planned invocation: 201 body, or BudgetExceeded (recorded)."""
    from app.services.charges import _refusal, admission, check_allowed, curve_for, requested_json

    if not 1 <= ttl_seconds <= max_ttl_seconds:
        raise Unprocessable(f"ttl_seconds must be in [1, {max_ttl_seconds}], got {ttl_seconds}")
    curve = curve_for(mechanism)
    refusal = None
    with db.write() as s:
        st = find_dataset(s, ref, principal, lock=True)
        check_allowed(st, mechanism)
        expire_due(s, st)
        ok, after = admission(st, s, curve)
        requested = requested_json(st, mechanism_json, curve)
        now = utcnow()
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
                    created_at=now,
                    operation="reservation",
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
        else:
            r = Reservation(
                id="rsv_" + secrets.token_hex(8),
                dataset_id=st.dataset.id,
                status="active",
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
                key_id=principal.key_id,
                created_at=now,
                expires_at=now + timedelta(seconds=ttl_seconds),
            )
            s.add(r)
            s.flush()
            from app.services.charges import current_spent

            body = {**reservation_json(r), "spent": current_spent(st), "requested": requested}
    if refusal is not None:
        raise refusal
    return body


def _locked_reservation(
    s: Session, principal: Principal, reservation_id: str
) -> tuple[Reservation, DatasetState]:
    r = s.get(Reservation, reservation_id)
    if r is None or not principal.can_see(r.dataset_id):
        raise NotFound(f"no reservation {reservation_id!r}")
    st = find_dataset(s, r.dataset_id, principal, lock=True)
    s.refresh(r)
    return r, st


def commit(db: Database, principal: Principal, reservation_id: str) -> dict[str, Any]:
    """Commit a reservation into the ledger (idempotent: a committed one answers the same).

    An expired reservation has already been charged: the answer says so (status ``expired``)
    with its ledger entry. A released one cannot be committed (409).
    """
    with db.write() as s:
        r, st = _locked_reservation(s, principal, reservation_id)
        expire_due(s, st)
        s.refresh(r)
        if r.status == "active":
            now = utcnow()
            r.status = "committed"
            r.resolved_at = now
            r.resolved_by = principal.key_id
            s.flush()
            r.ledger_entry_id = _charge_reservation(s, st, r, "reservation", now)
        elif r.status == "released":
            raise Conflict(f"reservation {reservation_id!r} was released; it cannot be committed")
        from app.services.charges import current_spent

        return {**reservation_json(r), "spent": current_spent(st)}


def release(db: Database, principal: Principal, reservation_id: str) -> dict[str, Any]:
    """Release a reservation (idempotent). Expired or committed ones are already charged: 409."""
    with db.write() as s:
        r, st = _locked_reservation(s, principal, reservation_id)
        expire_due(s, st)
        s.refresh(r)
        if r.status == "active":
            r.status = "released"
            r.resolved_at = utcnow()
            r.resolved_by = principal.key_id
        elif r.status in ("committed", "expired"):
            raise Conflict(
                f"reservation {reservation_id!r} is {r.status}: its budget is already charged",
                reservation=reservation_json(r),
            )
        from app.services.charges import current_spent

        return {**reservation_json(r), "spent": current_spent(st)}


def get_reservation(db: Database, principal: Principal, reservation_id: str) -> dict[str, Any]:
    with db.read() as s:
        r = s.get(Reservation, reservation_id)
        if r is None or not principal.can_see(r.dataset_id):
            raise NotFound(f"no reservation {reservation_id!r}")
        return reservation_json(r)


def sweep_expired(db: Database) -> int:
    """Charge every expired reservation in the database (the periodic sweeper)."""
    now = utcnow()
    with db.read() as s:
        due = sorted(
            {
                r.dataset_id
                for r in s.scalars(select(Reservation).where(Reservation.status == "active"))
                if _aware(r.expires_at) <= now
            }
        )
    n = 0
    for dataset_id in due:
        with db.write() as s:
            st = find_dataset(s, dataset_id, SYSTEM, lock=True)
            n += expire_due(s, st, now)
    return n


__all__ = [
    "commit",
    "expire_due",
    "get_reservation",
    "release",
    "reservation_json",
    "reserve",
    "sweep_expired",
]
