"""Two-phase charging: hold budget before running, then commit into the ledger or release.

* ``reserve``: admitted like a charge (active holds count as spent); 409 when it does not fit
  (recorded as a rejection with operation ``reservation``).
* ``commit``: turns the hold into a ledger entry (source ``reservation``). Idempotent.
* ``release``: frees the hold; the pipeline asserts that no output was released. Idempotent.
* Expiry fails closed: a hold past its ``expires_at`` is charged into the ledger (source
  ``reservation_expired``) and audited, never silently freed. Expiry happens inside every
  write transaction on the dataset and in the periodic sweeper.

Every transition happens under the dataset's totals lock, so racing commit / release / expiry
resolve to exactly one outcome.
"""

from __future__ import annotations

import secrets
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app import observability
from app.accounting.curve import PrivacyCurve
from app.accounting.mechanisms import Mechanism
from app.accounting.orders import ORDERS_VERSION
from app.db.engine import Database
from app.db.models import Reservation, utcnow
from app.services import audit, idempotency
from app.services.curves import (
    curve_of,
    finite_or_none,
    iso,
    rdp_to_bytes,
    request_hash,
    spend_of,
)
from app.services.datasets import DatasetState, find_dataset
from app.services.errors import BudgetExceeded, Conflict, NotFound, Unprocessable
from app.services.keys import SYSTEM, Principal


def _aware(ts: datetime) -> datetime:
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


def _charge_hold(
    session: Session, st: DatasetState, r: Reservation, source: str, now: datetime
) -> int:
    """Append the reservation's curve to the ledger (the caller holds the lock)."""
    from app.services.charges import append_entry

    curve = curve_of(r)
    after = st.curve + curve
    sp = spend_of(st.dataset, after)
    entry = append_entry(
        session,
        st,
        kind=r.kind,
        count=r.count,
        mechanism_json={k: v for k, v in r.mechanism.items() if k != "v"},
        curve=curve,
        after=after,
        spend_after=sp,
        label=r.label,
        metadata=r.metadata_,
        key_id=r.key_id,
        source=source,
        reservation_id=r.id,
        now=now,
    )
    return int(entry["id"])


def _count(session: Session, dataset_id: str, kind: str, outcome: str) -> None:
    observability.count(
        session, observability.RESERVATIONS, dataset=dataset_id, mechanism=kind, outcome=outcome
    )


def _expire(session: Session, st: DatasetState, r: Reservation, now: datetime) -> None:
    r.status = "expired"
    _count(session, st.dataset.id, r.kind, "expired")
    r.resolved_at = now
    r.ledger_entry_id = _charge_hold(session, st, r, "reservation_expired", now)
    audit.record(
        session,
        SYSTEM,
        "reservation.expired",
        dataset_id=st.dataset.id,
        target_id=r.id,
        details={"ledger_entry_id": r.ledger_entry_id, "mechanism": r.mechanism},
    )


def settle_holds(session: Session, st: DatasetState, now: datetime) -> PrivacyCurve | None:
    """Charge the locked dataset's expired reservations; return the sum of the curves of the
    ones still active (None when there are none)."""
    rows = session.scalars(
        select(Reservation)
        .where(Reservation.dataset_id == st.dataset.id, Reservation.status == "active")
        .order_by(Reservation.created_at, Reservation.id)
    ).all()
    held: PrivacyCurve | None = None
    for r in rows:
        if _aware(r.expires_at) <= now:
            _expire(session, st, r, now)
        else:
            held = curve_of(r) if held is None else held + curve_of(r)
    return held


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
    idempotency_key: str | None = None,
) -> dict[str, Any]:
    """Hold budget for a planned invocation: the reservation, or BudgetExceeded (recorded).
    A retry with the same Idempotency-Key answers the first answer and holds nothing more."""
    from app.services.charges import (
        check_allowed,
        current_spent,
        curve_for,
        decide,
        refuse,
        requested_json,
    )

    if not 1 <= ttl_seconds <= max_ttl_seconds:
        raise Unprocessable(f"ttl_seconds must be in [1, {max_ttl_seconds}], got {ttl_seconds}")
    curve = curve_for(mechanism)
    req_hash = request_hash(
        {
            "mechanism": mechanism_json,
            "ttl_seconds": ttl_seconds,
            "label": label,
            "metadata": metadata,
        }
    )
    problem: BudgetExceeded | None = None
    with db.write() as s:
        st = find_dataset(s, ref, principal, lock=True)
        if idempotency_key is not None:
            first = idempotency.replay(s, st.dataset.id, "reservation", idempotency_key, req_hash)
            if first is not None:
                return first[1]
        check_allowed(st, mechanism.kind)
        now = utcnow()
        d = decide(s, st, curve, now)
        if not d.admitted:
            problem = refuse(
                s,
                st,
                d,
                operation="reservation",
                mechanism_json=mechanism_json,
                label=label,
                metadata=metadata,
                key_id=principal.key_id,
            )
            _count(s, st.dataset.id, mechanism.kind, "refused")
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
            _count(s, st.dataset.id, mechanism.kind, "reserved")
            body = {
                **reservation_json(r),
                "spent": current_spent(st),
                "requested": requested_json(st, mechanism_json, curve),
            }
        if idempotency_key is not None:
            status, answer = (409, problem.to_problem()) if problem is not None else (201, body)
            idempotency.remember(
                s, st.dataset.id, "reservation", idempotency_key, req_hash, status, answer
            )
    if problem is not None:
        raise problem
    return body


def _locked(
    s: Session, principal: Principal, reservation_id: str
) -> tuple[Reservation, DatasetState]:
    """The reservation and its dataset, under the dataset's lock, expired holds settled."""
    r = s.get(Reservation, reservation_id)
    if r is None or not principal.can_see(r.dataset_id):
        raise NotFound(f"no reservation {reservation_id!r}")
    st = find_dataset(s, r.dataset_id, principal, lock=True)
    s.refresh(r)
    settle_holds(s, st, utcnow())
    return r, st


def commit(db: Database, principal: Principal, reservation_id: str) -> dict[str, Any]:
    """Commit a reservation into the ledger (idempotent: a committed one answers the same).

    An expired reservation has already been charged: the answer says so (status ``expired``)
    with its ledger entry. A released one cannot be committed (409).
    """
    from app.services.charges import current_spent

    with db.write() as s:
        r, st = _locked(s, principal, reservation_id)
        if r.status == "active":
            now = utcnow()
            r.status = "committed"
            r.resolved_at = now
            r.resolved_by = principal.key_id
            r.ledger_entry_id = _charge_hold(s, st, r, "reservation", now)
            _count(s, st.dataset.id, r.kind, "committed")
        elif r.status == "released":
            raise Conflict(f"reservation {reservation_id!r} was released; it cannot be committed")
        return {**reservation_json(r), "spent": current_spent(st)}


def release(db: Database, principal: Principal, reservation_id: str) -> dict[str, Any]:
    """Release a reservation (idempotent). Expired or committed ones are already charged: 409."""
    from app.services.charges import current_spent

    with db.write() as s:
        r, st = _locked(s, principal, reservation_id)
        if r.status == "active":
            r.status = "released"
            r.resolved_at = utcnow()
            r.resolved_by = principal.key_id
            _count(s, st.dataset.id, r.kind, "released")
        elif r.status in ("committed", "expired"):
            raise Conflict(
                f"reservation {reservation_id!r} is {r.status}: its budget is already charged",
                reservation=reservation_json(r),
            )
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
    for dataset_id in due:
        with db.write() as s:
            settle_holds(s, find_dataset(s, dataset_id, SYSTEM, lock=True), now)
    return len(due)


__all__ = [
    "commit",
    "get_reservation",
    "release",
    "reservation_json",
    "reserve",
    "settle_holds",
    "sweep_expired",
]
