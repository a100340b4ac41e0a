"""Two-phase charging: hold budget before running, then commit into the ledger or release.

* ``reserve``: admitted like a charge (active holds count as spent); 409 when it does not fit
  (recorded as a rejection with operation ``reservation``).
* ``commit``: turns the hold into a ledger entry (source ``reservation``). Idempotent.
* ``release``: frees the hold; the pipeline asserts that no output was released. Idempotent.
* Expiry fails closed: a hold past its ``expires_at`` is charged into the ledger (source
  ``reservation_expired``) and audited, never silently freed. Expiry happens inside every
  write transaction on the dataset (``admission.settle``) and in the sweeper, which wakes at
  the earliest hold's expiry (``app.main._sweeper``).

Every transition happens under the dataset's lock (``admission.locked``), so racing commit,
release and expiry resolve to exactly one outcome.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app import observability
from app import responses as r
from app.accounting.mechanisms import Mechanism
from app.db.engine import Database
from app.db.models import EntrySource, Reservation, ReservationStatus, utcnow
from app.errors import BudgetExceeded, Conflict, Forbidden, NotFound, Unprocessable
from app.principal import SYSTEM, Caller, Principal, Role
from app.services import admission, answers, audit, idempotency, refusals, state, verification
from app.services.auth import authenticated
from app.services.state import DatasetState

_R = Reservation.__table__.c
SCOPE = "reservation"


def reservation_answer(row: Reservation, key_name: str | None = None) -> r.Reservation:
    return r.Reservation(**_fields(row), key_name=key_name)


def _fields(row: Reservation) -> dict[str, Any]:
    return {
        "id": row.id,
        "dataset_id": row.dataset_id,
        "status": row.status.value,
        "mechanism": row.mechanism,
        "label": row.label,
        "metadata": row.metadata_,
        "rho": answers.finite_or_none(row.rho),
        "pure_epsilon": answers.finite_or_none(row.pure_eps),
        "created_at": row.created_at,
        "expires_at": row.expires_at,
        "resolved_at": row.resolved_at,
        "ledger_entry_id": row.ledger_entry_id,
        "key_id": row.key_id,
        "resolved_by": row.resolved_by,
        "allocation_id": row.allocation_id,
        "blocks": answers.block_span(row.block_from, row.block_to),
    }


def _answer(
    row: Reservation, st: DatasetState, requested: r.Requested | None = None
) -> r.ReservationAnswer:
    return r.ReservationAnswer(**_fields(row), spent=answers.spent(st), requested=requested)


def _count(session: Session, dataset_id: str, kind: str, outcome: str) -> None:
    observability.count(
        session, observability.RESERVATIONS, dataset=dataset_id, mechanism=kind, outcome=outcome
    )


def reserve(
    db: Database,
    caller: Caller,
    ref: str,
    *,
    mechanism: Mechanism,
    wire: dict[str, Any],
    ttl_seconds: int,
    label: str | None,
    metadata: dict[str, Any] | None,
    max_ttl_seconds: int,
    idempotency_key: str | None = None,
    allocation: str | None = None,
    blocks: tuple[str, str] | None = None,
) -> r.ReservationAnswer:
    """Hold budget for a planned invocation: the reservation, or BudgetExceeded (recorded).
    A retry with the same Idempotency-Key answers the first answer and holds nothing more."""
    principal = authenticated(db, caller)  # first: an unknown key learns nothing of the body
    if not 1 <= ttl_seconds <= max_ttl_seconds:
        raise Unprocessable(f"ttl_seconds must be in [1, {max_ttl_seconds}], got {ttl_seconds}")
    if (why := principal.may_charge(allocation)) is not None:
        raise Forbidden(why)
    asked = admission.Ask.of(
        mechanism, wire, label, metadata, principal, allocation=allocation, blocks=blocks
    )
    request: dict[str, Any] = {
        "mechanism": wire,
        "ttl_seconds": ttl_seconds,
        "label": label,
        "metadata": metadata,
    }
    if allocation is not None or blocks is not None:  # budget structures
        request["allocation"], request["blocks"] = allocation, blocks
    req_hash = idempotency.request_hash(request) if idempotency_key is not None else ""

    def work(s: Session, st: DatasetState) -> r.ReservationAnswer | BudgetExceeded:
        if idempotency_key is not None:
            first = idempotency.replay(s, st.id, SCOPE, idempotency_key, req_hash, principal.key_id)
            if first is not None:
                return idempotency.replayed(r.ReservationAnswer, first)
        verification.check_formulas_current(s, db)
        admission.check_not_archived(st)
        admission.check_allowed(st, asked.kind)
        admission.check_admissible(st, asked.kind, asked.curve)
        ask = admission.prepare(s, st, asked)
        dry = admission.decide(st, ask)
        if dry.admitted and st.is_pld:  # resolving a hold composes all the others again
            admission.check_holds_work(s, st, ask.wire)
        outcome: r.ReservationAnswer | BudgetExceeded
        if dry.admitted:
            row = admission.hold(s, st, ask, dry, ttl_seconds, utcnow())
            s.flush()
            _count(s, st.id, ask.kind, "reserved")
            outcome = _answer(row, st, answers.requested(st, wire, ask.curve))
        else:
            _count(s, st.id, ask.kind, "refused")
            if dry.limits:
                observability.count(
                    s, observability.STRUCTURE_REFUSALS, dataset=st.id, limit=dry.limits[0]
                )
            outcome = refusals.refuse(s, st, ask, dry, "reservation")
        if idempotency_key is not None:
            status, body = (
                (201, outcome.model_dump(mode="json"))
                if isinstance(outcome, r.ReservationAnswer)
                else (409, outcome.to_problem())
            )
            idempotency.remember(
                s, st.id, SCOPE, idempotency_key, req_hash, status, body, principal.key_id
            )
        return outcome

    admission.warm_pld(ref, [wire])  # a pld construction outside the lock
    outcome = admission.run_locked(db, ref, principal, work)
    if isinstance(outcome, BudgetExceeded):
        raise outcome  # the rejection is committed
    return outcome


def _resolve(
    db: Database, caller: Caller, reservation_id: str, to: ReservationStatus
) -> r.ReservationAnswer:
    """Commit or release an active reservation under its dataset's lock."""
    with db.read() as s:
        principal = authenticated(db, caller, s)
        dataset_id = _visible_dataset(s, principal, reservation_id)

    def work(s: Session, st: DatasetState) -> r.ReservationAnswer:
        now = utcnow()
        row = s.get(Reservation, reservation_id)
        assert row is not None
        if principal.allocations is not None:  # a key limited to allocations: one of its own
            held_for = None
            if row.allocation_id is not None:
                held_for = st.tallies().allocation_by_id(s, row.allocation_id).name
            if (why := principal.may_charge(held_for)) is not None:
                raise Forbidden(why)
        foreign = row.key_id != principal.key_id  # a hold another key made
        if to is ReservationStatus.RELEASED and foreign and not principal.has_role(Role.ADMIN):
            # releasing asserts that nothing derived from the hold was published: only the
            # pipeline that made it can say so (or an admin, audited below); another pipeline
            # key freeing it would leave the owner's run uncharged
            raise Forbidden(
                f"reservation {reservation_id!r} was made by another key; only that key or an "
                "admin key may release it (committing it is allowed)"
            )
        if row.status is ReservationStatus.ACTIVE and admission.aware(row.expires_at) <= now:
            # due since the group settled (it waited for the lock, or ran earlier units):
            # charged now, as the sweeper would (fail closed); a release is then refused (409,
            # raised after this write, which stands whatever this unit answers: run_locked)
            admission.settle(s, st, now)
        if row.status is ReservationStatus.ACTIVE:
            # the ledger and tallies first: they may refuse (422) before writing anything, and
            # run_locked commits a unit's writes even when it raises, so a status set first
            # would stand without its entry (a "committed" hold with nothing in the ledger)
            if to is ReservationStatus.COMMITTED:
                admission.append_held(s, st, row, EntrySource.RESERVATION, now)
            else:
                admission.release_hold(s, st, row)
                row.resolved_at = now
                if foreign:  # an admin freed another key's hold: on the record
                    audit.record(
                        s,
                        principal,
                        "reservation.released",
                        dataset_id=st.id,
                        target_id=row.id,
                        details={"held_by": row.key_id, "kind": row.kind},
                    )
            row.status = to
            row.resolved_by = principal.key_id
            _count(s, st.id, row.kind, to.value)
        elif to is ReservationStatus.COMMITTED and row.status is ReservationStatus.RELEASED:
            raise Conflict(f"reservation {reservation_id!r} was released; it cannot be committed")
        elif to is ReservationStatus.RELEASED and row.status in (
            ReservationStatus.COMMITTED,
            ReservationStatus.EXPIRED,
        ):
            raise Conflict(
                f"reservation {reservation_id!r} is {row.status.value}: its budget is "
                "already charged",
                reservation=reservation_answer(row).model_dump(mode="json"),
            )
        return _answer(row, st)

    return admission.run_locked(db, dataset_id, principal, work)


def commit(db: Database, caller: Caller, reservation_id: str) -> r.ReservationAnswer:
    """Commit a reservation into the ledger (idempotent: a committed one answers the same).

    An expired reservation has already been charged: the answer says so (status ``expired``)
    with its ledger entry. A released one cannot be committed (409).
    """
    return _resolve(db, caller, reservation_id, ReservationStatus.COMMITTED)


def release(db: Database, caller: Caller, reservation_id: str) -> r.ReservationAnswer:
    """Release a reservation (idempotent). Expired or committed ones are already charged: 409."""
    return _resolve(db, caller, reservation_id, ReservationStatus.RELEASED)


def _visible_dataset(s: Session, principal: Principal, reservation_id: str) -> str:
    dataset_id: str | None = s.scalar(select(_R.dataset_id).where(_R.id == reservation_id))
    if dataset_id is None or not principal.can_see(dataset_id):
        raise NotFound(f"no reservation {reservation_id!r}")
    return dataset_id


def get_reservation(db: Database, caller: Caller, reservation_id: str) -> r.Reservation:
    with db.read() as s:
        principal = authenticated(db, caller, s)
        _visible_dataset(s, principal, reservation_id)
        row = s.get(Reservation, reservation_id)
        assert row is not None
        return reservation_answer(row)


def list_reservations(
    db: Database, caller: Caller, ref: str, status: str | None = "active", limit: int = 1000
) -> r.ReservationList:
    """A dataset's reservations (``status``: only those; None: all), soonest expiry first (the
    key is checked before the query)."""
    with db.read() as s:
        principal = authenticated(db, caller, s)
        if status is not None and status not in {x.value for x in ReservationStatus}:
            raise Unprocessable(
                f"status must be one of {[x.value for x in ReservationStatus]}, got {status!r}"
            )
        st = state.load(s, ref, principal)
        where = [_R.dataset_id == st.id]
        if status is not None:
            where.append(_R.status == ReservationStatus(status))
        total = s.scalar(select(func.count()).select_from(Reservation).where(*where)) or 0
        rows = s.scalars(
            select(Reservation).where(*where).order_by(_R.expires_at, _R.id).limit(limit)
        ).all()
        names = answers.key_labels(s, (x.key_id for x in rows))
        return r.ReservationList(
            reservations=[reservation_answer(x, names.get(x.key_id or "")) for x in rows],
            total=total,
        )


def next_expiry(db: Database) -> datetime | None:
    """When the earliest active hold in the database falls due (None without holds)."""
    with db.read_core() as conn:
        due: datetime | None = conn.execute(
            select(func.min(_R.expires_at)).where(_R.status == ReservationStatus.ACTIVE)
        ).scalar()
    return None if due is None else admission.aware(due)


def sweep_expired(db: Database) -> int:
    """Charge every due hold in the database (the periodic sweeper); how many datasets."""
    now = utcnow()
    with db.read() as s:
        due = list(
            s.scalars(
                select(_R.dataset_id)
                .where(_R.status == ReservationStatus.ACTIVE, _R.expires_at <= now)
                .distinct()
            )
        )
    for dataset_id in sorted(due):
        with db.write() as s, admission.locked(s, dataset_id, SYSTEM, now):
            pass  # locking settles the due holds
    return len(due)


__all__ = [
    "commit",
    "get_reservation",
    "list_reservations",
    "next_expiry",
    "release",
    "reservation_answer",
    "reserve",
    "sweep_expired",
]
