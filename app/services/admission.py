"""Admission: everything that happens to a dataset's budget under its lock.

Every write on a budget (charge, reservation, commit, release, expiry) runs inside
``locked(session, ref, principal)`` (usually through ``run_locked``, which groups the concurrent
writes on one dataset into one transaction), which

1. locks the dataset and its totals row (``state.load(lock=True)``),
2. charges the holds that are due, fail closed (``settle``): an expired reservation is charged
   into the ledger, never silently freed,
3. lets the caller ``decide`` (one dry run of the new curve through the dataset's ``Filter``:
   the ledger, the active holds and the new curve together must stay within budget), then
   ``refuse`` (recording the rejection), ``append`` a ledger entry, or ``hold`` budget for a
   reservation,
4. writes the totals row back once (``state.save``).

Nothing here reads more than the totals row unless a hold is due: the held sum lives in the
totals row (``RunningSum``) and the earliest expiry beside it.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar, cast

from sqlalchemy import Table, func, insert, select
from sqlalchemy.orm import Session

from app import observability
from app import responses as r
from app.accounting import pld_mechanisms
from app.accounting.curve import PrivacyCurve
from app.accounting.filters import RHO_FILTERS, Spend
from app.accounting.mechanisms import Mechanism
from app.accounting.pld import Pld
from app.accounting.pld_filter import PldFilter
from app.db.codec import curve_columns, curve_of
from app.db.engine import Database
from app.db.models import (
    EntrySource,
    LedgerEntry,
    Rejection,
    Reservation,
    ReservationStatus,
    utcnow,
)
from app.errors import BudgetExceeded, DatasetArchived, NotFound, ProblemError, Unprocessable
from app.principal import SYSTEM, Principal
from app.services import answers, audit, state
from app.services.state import DatasetState

_LEDGER = cast(Table, LedgerEntry.__table__)
_INSERT_ENTRY = insert(_LEDGER).returning(_LEDGER.c.id)
_R = Reservation.__table__.c
T = TypeVar("T")


@dataclass(frozen=True)
class Ask:
    """What a charge or reservation asks for: a mechanism invocation and its curve."""

    kind: str
    count: int
    wire: dict[str, Any]  # the mechanism as given, defaults filled in
    curve: PrivacyCurve
    label: str | None = None
    metadata: dict[str, Any] | None = None
    key_id: str | None = None

    @classmethod
    def of(
        cls,
        mechanism: Mechanism,
        wire: dict[str, Any],
        label: str | None = None,
        metadata: dict[str, Any] | None = None,
        key_id: str | None = None,
    ) -> Ask:
        """The ask for ``mechanism`` (422 when its privacy loss overflows)."""
        try:
            curve = mechanism.curve()
        except ValueError as exc:
            raise Unprocessable(str(exc)) from None
        return cls(mechanism.kind, mechanism.count, wire, curve, label, metadata, key_id)

    @classmethod
    def of_hold(cls, hold: Reservation) -> Ask:
        """The ask a reservation made (its stored curve: never recomputed)."""
        wire = {k: v for k, v in hold.mechanism.items() if k != "v"}
        return cls(
            hold.kind, hold.count, wire, curve_of(hold), hold.label, hold.metadata_, hold.key_id
        )


def aware(ts: datetime) -> datetime:
    """SQLite returns naive datetimes, which are UTC by construction."""
    return ts if ts.tzinfo is not None else ts.replace(tzinfo=UTC)


def run_locked(
    db: Database,
    ref: str,
    principal: Principal,
    work: Callable[[Session, DatasetState], T],
) -> T:
    """``work(session, state)`` on dataset ``ref`` under its lock, grouped with the concurrent
    work on the same dataset into one transaction (``app.db.group_commit``): one lock and one
    durable commit for the group, each unit seeing the state the previous ones left.

    ``work`` may raise a ``ProblemError`` only before it writes anything; a refusal it records
    is returned, not raised (the caller raises it once the rejection is committed).
    """

    @contextmanager
    def open_group() -> Iterator[tuple[Session, DatasetState]]:
        with db.write() as s, locked(s, ref, SYSTEM) as st:
            yield s, st

    def unit(context: tuple[Session, DatasetState]) -> T:
        s, st = context
        if not principal.can_see(st.id):
            raise NotFound(f"no dataset {ref!r}")
        return work(s, st)

    return db.groups.submit(("dataset", ref), open_group, unit, own_errors=(ProblemError,))


@contextmanager
def locked(
    session: Session, ref: str, principal: Principal, now: datetime | None = None
) -> Iterator[DatasetState]:
    """The dataset under its lock with due holds settled; its totals are saved on exit."""
    now = now or utcnow()
    st = state.load(session, ref, principal, lock=True)
    settle(session, st, now)
    yield st
    state.save(session, st, now)


def check_allowed(st: DatasetState, kind: str) -> None:
    """422 unless the dataset allows mechanisms of ``kind``."""
    allowed = st.allowed_mechanisms
    if allowed is not None and kind not in allowed:
        raise Unprocessable(
            f"mechanism {kind!r} is not allowed on dataset {st.name!r} "
            f"(allowed: {', '.join(allowed)})",
            allowed_mechanisms=allowed,
        )


def check_not_archived(st: DatasetState) -> None:
    """409 ``dataset-archived`` when the dataset is archived: it takes no new charge or
    reservation (nothing is recorded). Committing a hold it already had is allowed."""
    if st.archived_at is not None:
        raise DatasetArchived(
            f"dataset {st.name!r} is archived (since {aware(st.archived_at).isoformat()}): it "
            "refuses charges and reservations; an admin can unarchive it",
            dataset_id=st.id,
            archived_at=aware(st.archived_at).isoformat().replace("+00:00", "Z"),
        )


@dataclass(frozen=True)
class Decision:
    """Would an ask fit? ``admitted`` is decided on the ledger, the active holds and the ask;
    ``after`` / ``spend_after`` are the ledger's curve and spend with the ask recorded. A
    ``pld`` dataset also carries the ask's PLD and the ledger's PLD after it."""

    admitted: bool
    after: PrivacyCurve
    spend_after: Spend
    pld_new: Pld | None = None
    pld_after: Pld | None = None


def entry_pld(st: DatasetState, wire: dict[str, Any]) -> Pld:
    """The PLD of a mechanism on a ``pld`` dataset's grid; 422 for a kind without one."""
    assert st.pld is not None
    try:
        return pld_mechanisms.for_mechanism(wire, interval=st.pld.interval)
    except pld_mechanisms.NoPldError as exc:
        raise Unprocessable(str(exc), accepted_accountings=exc.accepted) from None
    except ValueError as exc:
        raise Unprocessable(str(exc)) from None


def decide(st: DatasetState, ask: Ask) -> Decision:
    """Would ``ask`` fit? One dry run: the dataset's filter over the composed curves, or, on a
    ``pld`` dataset, its composed privacy loss distribution."""
    if not st.is_pld:
        dry = st.filter.dry_run(st.committed, st.held_curve, ask.curve)
        return Decision(dry.admitted, dry.after, dry.spend_after)
    assert st.pld is not None
    new = entry_pld(st, ask.wire)
    p = PldFilter(st.budget).dry_run(st.pld, st.pld_held, new)
    return Decision(p.admitted, st.committed + ask.curve, p.spend_after, new, p.after)


# --- refusing ---------------------------------------------------------------------------------


def refusal(st: DatasetState, ask: Ask, dry: Decision, *, dry_run: bool = False) -> BudgetExceeded:
    """The 409 problem for an ask that does not fit."""
    f, b = st.filter, st.budget
    if f.kind in RHO_FILTERS:
        detail = (
            f"refused: rho would reach {dry.after.rho:.6g} (with active reservations "
            f"counted), above the {f.kind.value} filter's bound {f.bound:.6g} for budget "
            f"(epsilon={b.epsilon:g}, delta={b.delta:g})"
        )
    else:
        detail = (
            f"refused: epsilon at delta={b.delta:g} would reach {dry.spend_after.epsilon:.6g} "
            f"(with active reservations counted), above the budget {b.epsilon:g} "
            f"({f.kind.value} filter)"
        )
    return BudgetExceeded(
        detail,
        dataset_id=st.id,
        spent=answers.spent(st).model_dump(mode="json"),
        budget=answers.budget(st).model_dump(mode="json"),
        requested=answers.requested(st, ask.wire, ask.curve).model_dump(mode="json"),
        would_spend=answers.spent(st, dry.after, dry.spend_after).model_dump(mode="json"),
        dry_run=dry_run,
    )


def refuse(
    session: Session, st: DatasetState, ask: Ask, dry: Decision, operation: str
) -> BudgetExceeded:
    """The 409 problem for a refused ask, its rejection recorded in this transaction."""
    problem = refusal(st, ask, dry)
    session.add(
        Rejection(
            dataset_id=st.id,
            created_at=utcnow(),
            operation=operation,
            mechanism=ask.wire,
            label=ask.label,
            metadata_=ask.metadata,
            key_id=ask.key_id,
            reason=problem.detail,
            spent=problem.extra["spent"],
            requested=problem.extra["requested"],
            budget=problem.extra["budget"],
        )
    )
    return problem


# --- the ledger -------------------------------------------------------------------------------


def append(
    session: Session,
    st: DatasetState,
    ask: Ask,
    after: PrivacyCurve,
    spend_after: Spend,
    *,
    source: EntrySource = EntrySource.CHARGE,
    reservation_id: str | None = None,
    now: datetime | None = None,
    pld_after: Pld | None = None,
) -> r.Entry:
    """Insert a ledger entry for ``ask`` (the ledger becomes ``after``, spending
    ``spend_after``; on a ``pld`` dataset its PLD becomes ``pld_after``) and update the totals
    in memory."""
    now = now or utcnow()
    values: dict[str, Any] = {
        "dataset_id": st.id,
        "seq": st.entry_count + 1,
        "created_at": now,
        "kind": ask.kind,
        "mechanism": {**ask.wire, "v": 1},
        "count": ask.count,
        **curve_columns(ask.curve),
        "label": ask.label,
        "metadata": ask.metadata,
        "key_id": ask.key_id,
        "source": source,
        "reservation_id": reservation_id,
        "spent_epsilon": spend_after.epsilon,
    }
    entry_id = session.connection().execute(_INSERT_ENTRY, values).scalar_one()
    c = st.mechanism_counts.get(ask.kind) or {"entries": 0, "count": 0, "rho": 0.0}
    rho_sum = c["rho"] + ask.curve.rho if c["rho"] is not None else None
    st.mechanism_counts = {
        **st.mechanism_counts,
        ask.kind: {
            "entries": c["entries"] + 1,
            "count": c["count"] + ask.count,
            "rho": rho_sum if rho_sum is not None and math.isfinite(rho_sum) else None,
        },
    }
    st.committed, st.spent = after, spend_after
    if st.is_pld:
        assert pld_after is not None
        st.pld, st.pld_dirty = pld_after, True
    st.entry_count += 1
    st.last_entry_at = now
    st.dirty = True
    return answers.entry({**values, "id": entry_id})


def append_held(
    session: Session, st: DatasetState, hold: Reservation, source: EntrySource, now: datetime
) -> r.Entry:
    """Charge a reservation's hold into the ledger and take it out of the held sum."""
    ask = Ask.of_hold(hold)
    after = st.committed + ask.curve
    pld_after = None
    if st.is_pld:
        assert st.pld is not None
        pld_after = st.pld.compose(entry_pld(st, ask.wire))
        spend_after = PldFilter(st.budget).spend(pld_after)
    else:
        spend_after = st.filter.spend(after)
    entry = append(
        session,
        st,
        ask,
        after,
        spend_after,
        source=source,
        reservation_id=hold.id,
        now=now,
        pld_after=pld_after,
    )
    _unhold(session, st, hold, ask.curve)
    hold.resolved_at = now
    hold.ledger_entry_id = entry.id
    return entry


# --- holds ------------------------------------------------------------------------------------


def hold(
    session: Session,
    st: DatasetState,
    ask: Ask,
    decision: Decision,
    ttl_seconds: int,
    now: datetime,
) -> Reservation:
    """Hold budget for ``ask`` (admitted by ``decision``) until it is committed, released or
    expires."""
    row = Reservation(
        id="rsv_" + secrets.token_hex(8),
        dataset_id=st.id,
        status=ReservationStatus.ACTIVE,
        kind=ask.kind,
        mechanism={**ask.wire, "v": 1},
        count=ask.count,
        **curve_columns(ask.curve),
        label=ask.label,
        metadata_=ask.metadata,
        key_id=ask.key_id,
        created_at=now,
        expires_at=now + timedelta(seconds=ttl_seconds),
    )
    session.add(row)
    st.held = st.held.add(ask.curve)
    if st.is_pld:
        assert st.pld is not None and decision.pld_new is not None
        base = st.pld_held if st.pld_held is not None else Pld.identity(st.pld.interval)
        st.pld_held, st.pld_dirty = base.compose(decision.pld_new), True
    if st.held_next_expiry is None or row.expires_at < aware(st.held_next_expiry):
        st.held_next_expiry = row.expires_at
    st.dirty = True
    return row


def release_hold(session: Session, st: DatasetState, hold: Reservation) -> None:
    """Free a hold: its budget leaves the held sum (nothing enters the ledger)."""
    _unhold(session, st, hold, curve_of(hold))


def _unhold(session: Session, st: DatasetState, hold: Reservation, curve: PrivacyCurve) -> None:
    others = (_R.dataset_id == st.id, _R.status == ReservationStatus.ACTIVE, _R.id != hold.id)
    st.held = st.held.remove(curve)
    st.held_next_expiry = session.scalar(select(func.min(_R.expires_at)).where(*others))
    if st.is_pld:
        # a PLD cannot be subtracted: the holds that remain are composed again (O(holds))
        assert st.pld is not None
        remaining = Pld.identity(st.pld.interval)
        mechanisms = session.scalars(select(_R.mechanism).where(*others)).all()
        for m in mechanisms:
            remaining = remaining.compose(entry_pld(st, m))
        st.pld_held, st.pld_dirty = (remaining if mechanisms else None), True
    st.dirty = True


def settle(session: Session, st: DatasetState, now: datetime) -> int:
    """Charge the locked dataset's due holds into the ledger (fail closed); how many."""
    if st.held_next_expiry is None or aware(st.held_next_expiry) > now:
        return 0
    due = session.scalars(
        select(Reservation)
        .where(_R.dataset_id == st.id, _R.status == ReservationStatus.ACTIVE, _R.expires_at <= now)
        .order_by(_R.expires_at, _R.id)
    ).all()
    for hold in due:
        hold.status = ReservationStatus.EXPIRED
        entry = append_held(session, st, hold, EntrySource.RESERVATION_EXPIRED, now)
        observability.count(
            session,
            observability.RESERVATIONS,
            dataset=st.id,
            mechanism=hold.kind,
            outcome="expired",
        )
        audit.record(
            session,
            SYSTEM,
            "reservation.expired",
            dataset_id=st.id,
            target_id=hold.id,
            details={"ledger_entry_id": entry.id, "mechanism": hold.mechanism},
        )
    return len(due)


__all__ = [
    "Ask",
    "Decision",
    "append",
    "append_held",
    "aware",
    "check_allowed",
    "check_not_archived",
    "decide",
    "entry_pld",
    "hold",
    "locked",
    "refusal",
    "refuse",
    "release_hold",
    "run_locked",
    "settle",
]
