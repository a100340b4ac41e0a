"""Admission: everything that happens to a dataset's budget under its lock.

Every write on a budget (charge, reservation, commit, release, expiry) runs inside
``locked(session, ref, principal)`` (usually through ``run_locked``, which groups the concurrent
writes on one dataset into one transaction), which

1. locks the dataset and its totals row (``state.load(lock=True)``),
2. charges the holds that are due, fail closed (``settle``): an expired reservation is charged
   into the ledger, never silently freed,
3. lets the caller ``decide`` (one dry run of the new curve through the dataset's ``Filter``:
   the ledger, the active holds and the new curve together must stay within budget), then
   ``refusals.refuse`` (the 409 that says why, the rejection recorded), ``append`` a ledger
   entry, or ``hold`` budget for a reservation,
4. writes the totals row back once (``state.save``).

Nothing here reads more than the totals row unless a hold is due: the held sum lives in the
totals row (``RunningSum``) and the earliest expiry beside it.
"""

from __future__ import annotations

import math
import secrets
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar, cast

from sqlalchemy import Table, bindparam, func, insert, select, text
from sqlalchemy.orm import Session

from app import observability
from app import responses as r
from app.accounting import pld_mechanisms
from app.accounting.curve import PrivacyCurve
from app.accounting.filters import RHO_FILTERS, DryRun, Filter, Spend
from app.accounting.mechanisms import Mechanism
from app.accounting.pld import Pld, PldWork, PldWorkExceeded
from app.accounting.pld_filter import PldFilter
from app.db.codec import curve_columns, curve_of
from app.db.engine import Database
from app.db.models import (
    DatasetBlock,
    EntrySource,
    LedgerEntry,
    Reservation,
    ReservationStatus,
    utcnow,
)
from app.errors import DatasetArchived, NotFound, ProblemError, Unprocessable
from app.principal import SYSTEM, Principal
from app.services import answers, audit, auth, blocks, state
from app.services.state import DatasetState
from app.services.tallies import ALLOCATION_BLOCK, BLOCK, Tally

_LEDGER = cast(Table, LedgerEntry.__table__)
_INSERT_ENTRY = insert(_LEDGER).returning(_LEDGER.c.id)
_INSERT_ENTRIES = insert(_LEDGER)  # a group's entries, ids given (PostgreSQL)
# PostgreSQL: ids for a group's entries, drawn from the ledger's own sequence in one round trip
_ENTRY_IDS = text(
    "SELECT nextval(pg_get_serial_sequence('ledger_entry', 'id')) FROM generate_series(1, :n)"
)
_ENTRY_COLUMNS = (
    "dataset_id",
    "seq",
    "created_at",
    "kind",
    "mechanism",
    "count",
    "rho",
    "rdp",
    "pure_eps",
    "gaussian_only",
    "delta",
    "orders_version",
    "label",
    "metadata",
    "key_id",
    "source",
    "reservation_id",
    "spent_epsilon",
    "allocation_id",
    "block_from",
    "block_to",
)
# PostgreSQL: the entry and the dataset's totals after it in one statement (one round trip)
_INSERT_ENTRY_SAVING = state.saving_totals(
    insert(_LEDGER)
    .values({c: bindparam("e_" + c, type_=_LEDGER.c[c].type) for c in _ENTRY_COLUMNS})
    .returning(_LEDGER.c.id)
)
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
    # budget structures (issue 15): the allocation named and the block range asked for, and
    # once resolved under the lock (``prepare``), the tallies they stand for
    allocation: str | None = None
    blocks: tuple[str, str] | None = None
    allocation_id: str | None = None
    target: Target | None = None
    key_name: str | None = None  # the key's label, for the answer (the ledger stores the id)

    @classmethod
    def of(
        cls,
        mechanism: Mechanism,
        wire: dict[str, Any],
        label: str | None = None,
        metadata: dict[str, Any] | None = None,
        principal: Principal | None = None,
        allocation: str | None = None,
        blocks: tuple[str, str] | None = None,
    ) -> Ask:
        """The ask for ``mechanism`` by ``principal``'s key (422 when its privacy loss
        overflows)."""
        try:
            curve = mechanism.curve()
        except ValueError as exc:
            raise Unprocessable(str(exc)) from None
        return cls(
            mechanism.kind,
            mechanism.count,
            wire,
            curve,
            label,
            metadata,
            principal.key_id if principal is not None else None,
            allocation=allocation,
            blocks=blocks,
            key_name=principal.key_name if principal is not None else None,
        )

    @classmethod
    def of_hold(cls, hold: Reservation) -> Ask:
        """The ask a reservation made (its stored curve: never recomputed)."""
        wire = {k: v for k, v in hold.mechanism.items() if k != "v"}
        span = (hold.block_from, hold.block_to) if hold.block_from and hold.block_to else None
        return cls(
            hold.kind,
            hold.count,
            wire,
            curve_of(hold),
            hold.label,
            hold.metadata_,
            hold.key_id,
            blocks=span,
            allocation_id=hold.allocation_id,
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

    ``work`` may raise a ``ProblemError`` only before it writes anything of its own; a refusal
    it records is returned, not raised (the caller raises it once the rejection is committed).
    The one write allowed before such a raise is ``settle`` (charging due holds), which holds
    whatever the unit answers: a release of a hold that fell due answers 409 after it.
    """

    @contextmanager
    def open_group(take: Callable[[], int]) -> Iterator[tuple[Session, DatasetState]]:
        with db.write() as s, locked(s, ref, SYSTEM) as st:
            size = take()  # under the lock: the units that queued while it was awaited join
            # a lone unit writes the totals with its entry; a group, once at its end (``save``),
            # and on PostgreSQL its entries too, in one INSERT, with ids drawn up front
            st.totals_with_entry = size == 1
            if size > 1 and s.get_bind().dialect.name == "postgresql":
                ids = s.connection().execute(_ENTRY_IDS, {"n": size}).scalars().all()
                st.entry_ids.extend(int(i) for i in ids)
            yield s, st

    def unit(context: tuple[Session, DatasetState]) -> T:
        s, st = context
        if not principal.can_see(st.id):
            raise NotFound(f"no dataset {ref!r}")
        auth.confirm_if_revoked(s, principal, st.keys_revoked_at)  # revoked while it waited?
        return work(s, st)

    return db.groups.submit(("dataset", ref), open_group, unit, own_errors=(ProblemError,))


@contextmanager
def locked(
    session: Session, ref: str, principal: Principal, now: datetime | None = None
) -> Iterator[DatasetState]:
    """The dataset under its lock with due holds settled; its totals are saved on exit; 401
    when ``principal``'s key was revoked while the lock was awaited. The
    time is read once the lock is held: read before, a hold that expired while the lock was
    awaited was still active to the request (a release then freed budget that expiry charges)."""
    st = state.load(session, ref, principal, lock=True)
    auth.confirm_if_revoked(session, principal, st.keys_revoked_at)  # revoked while it waited?
    now = now or utcnow()
    settle(session, st, now)
    yield st
    if st.pending_entries:  # the group's entries (``append``), before its totals
        session.connection().execute(_INSERT_ENTRIES, st.pending_entries)
        st.pending_entries.clear()
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


def check_entry_delta(
    st: DatasetState,
    kind: str,
    delta: float,
    f: Filter | None = None,
    whose: str = "",
    field: str = "entry_delta_budget",
) -> None:
    """422 when a mechanism with its own delta (approx_dp; zcdp or rdp with ``delta``) is asked
    of an adaptive filter (the dataset's, or ``f``, an allocation's: ``whose`` names it) that
    can never admit it: one that sets no part of its delta aside for such entries (the delta
    left for the conversion would then depend on choices made after seeing outputs;
    ``app.accounting.filters`` module docstring), or whose part (the setting ``field``) is
    smaller than this delta alone. A property of the request, not of the budget left."""
    f = st.filter if f is None else f
    if delta <= 0.0 or not f.rule.adaptive or delta <= f.entry_delta:
        return
    where = whose or f"dataset {st.name!r}"
    advice = (
        "Create the allocation with an entry_delta_budget (on a dataset that has one), or "
        "charge it without the allocation"
        if whose
        else "Charge it to a dataset created with adaptive: false, or with an "
        "entry_delta_budget (the part of its delta set aside for them), or give the "
        "mechanism without delta"
    )
    detail = (
        f"mechanism {kind!r} carries its own delta ({delta:g}); {where} has an adaptive "
        f"filter ({f.kind.value}) that sets no part of its delta aside for such entries "
        f"(the delta left for the conversion would depend on earlier outputs). {advice}"
        if f.entry_delta == 0.0
        else f"mechanism {kind!r} carries its own delta ({delta:g}), more than the "
        f"{field} of {where} ({f.entry_delta:g}), the part of its delta set aside "
        f"for such entries: it can never be admitted there"
    )
    raise Unprocessable(detail, filter=f.kind.value, entry_delta=delta, **{field: f.entry_delta})


def check_entry_deltas(st: DatasetState, kind: str, delta: float) -> None:
    """``check_entry_delta`` against the dataset's filter and, on a partitioned dataset, its
    lifetime budget's, whose split is positive wherever the blocks' is
    (``datasets._splits_agree``): a delta above it could never be admitted either."""
    check_entry_delta(st, kind, delta)
    if st.partition_unit is not None and st.lifetime is not None:
        check_entry_delta(
            st,
            kind,
            delta,
            st.lifetime,
            f"the lifetime budget of dataset {st.name!r}",
            "lifetime_entry_delta_budget",
        )


def check_allocation_entry_delta(
    st: DatasetState, kind: str, delta: float, allocation: Tally | None
) -> None:
    """``check_entry_delta`` against ``allocation``'s filter (nothing without one): an
    allocation sets its own part of the delta aside, or none."""
    if allocation is not None:
        check_entry_delta(st, kind, delta, allocation.filter, f"allocation {allocation.name!r}")


def check_admissible(st: DatasetState, kind: str, curve: PrivacyCurve) -> None:
    """422 for a mechanism the dataset's filter can never admit, whatever is left of the
    budget: its own delta on an adaptive filter (``check_entry_delta``), or no finite zCDP
    bound (a mechanism known only by RDP at a few orders) on a filter that admits by rho."""
    check_entry_deltas(st, kind, curve.delta)
    if st.filter.kind in RHO_FILTERS and not math.isfinite(curve.rho):
        raise Unprocessable(
            f"mechanism {kind!r} has no finite zCDP bound (rho); dataset {st.name!r} admits by "
            f"rho ({st.filter.kind.value} filter), so it can never admit it. Charge it to a "
            f"dataset with accounting 'rdp'",
            filter=st.filter.kind.value,
            accepted_accountings=["rdp"],
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
    # budget structures: each tally's dry run, the limits hit ("dataset", "lifetime",
    # "allocation") and the blocks whose budget (the dataset's, the allocation's) refused
    checks: tuple[tuple[Tally, DryRun], ...] = ()
    limits: tuple[str, ...] = ()
    blocks_exceeded: tuple[str, ...] = ()
    allocation_blocks_exceeded: tuple[str, ...] = ()


_PLD_GRIDS: OrderedDict[str, float] = OrderedDict()
"""The grid interval of each ``pld`` dataset this process charged, by id and by name, as last
seen under its lock (most recent ``PLD_GRIDS_KEPT``): what ``warm_pld`` builds on."""
PLD_GRIDS_KEPT = 4096
_PLD_GRIDS_LOCK = threading.Lock()


def warm_pld(ref: str, wires: Sequence[Mapping[str, Any]]) -> None:
    """Build the PLDs a charge of ``wires`` to dataset ``ref`` will compose into the construction
    cache before the dataset's lock is taken, when this process knows ``ref`` as a ``pld``
    dataset. A construction takes up to seconds, and on SQLite the lock is the whole
    database's: built under it, one pipeline's DP-SGD charge held every other dataset's writes
    for 3.7 s. Under the lock the same PLD is then a cache hit; if the grid changed meanwhile it
    is built there as before. Nothing is decided here: any error is left to the locked path,
    and nothing is built beyond a request's bound (``too_many_distinct``)."""
    with _PLD_GRIDS_LOCK:
        interval = _PLD_GRIDS.get(ref)
    if interval is None or pld_mechanisms.too_many_distinct(wires) is not None:
        return
    work = request_work()  # the locked path counts the same again: constructions refused
    try:  # for their work are remembered and refused there without being redone
        pld_mechanisms.check_kinds(wires)
        for wire in wires:
            pld_mechanisms.for_mechanism(wire, interval=interval, work=work)
    except ValueError:
        return


class PldWorkRefused(Unprocessable):
    """422: building an entry's PLD would take a request past ``PLD_WORK_LIMIT`` (nothing
    recorded). Refused rather than bounded more loosely: the dataset's stored distribution must
    compose every entry, and the only cheap stand-ins (all mass at +infinity, or the entry's
    pure-DP sum) would leave every later answer of the dataset at its curve rule or worse."""


def request_work() -> PldWork:
    """A fresh meter of the PLD work one request may do (``pld_mechanisms.PLD_WORK_LIMIT``)."""
    return PldWork(pld_mechanisms.PLD_WORK_LIMIT)


def entry_pld(st: DatasetState, wire: dict[str, Any], work: PldWork | None = None) -> Pld:
    """The PLD of a mechanism on a ``pld`` dataset's grid; 422 for a kind without one.

    ``work``: the request's meter (``request_work``), where a new entry is asked for: 422
    ``PldWorkRefused`` when its construction would take the request past its limit, naming the
    entry, its count and the limit, before that work is done. None (counted, not limited) for
    entries already admitted: a hold being committed, the holds recomposed, a ledger verified."""
    assert st.pld is not None
    with _PLD_GRIDS_LOCK:
        for ref in (st.id, st.name):
            _PLD_GRIDS[ref] = st.pld.interval
            _PLD_GRIDS.move_to_end(ref)
        while len(_PLD_GRIDS) > PLD_GRIDS_KEPT:
            _PLD_GRIDS.popitem(last=False)
    try:
        return pld_mechanisms.for_mechanism(wire, interval=st.pld.interval, work=work)
    except PldWorkExceeded as exc:
        raise PldWorkRefused(
            f"{exc}. Dataset {st.name!r} composes every entry into its privacy loss "
            "distribution; charge this one in parts with a smaller count (or fewer steps), "
            "or to a dataset with accounting 'rdp'",
            pld_work_limit=exc.limit,
            accepted_accountings=["rdp"],
        ) from None
    except pld_mechanisms.NoPldError as exc:
        raise Unprocessable(str(exc), accepted_accountings=exc.accepted) from None
    except ValueError as exc:
        raise Unprocessable(str(exc)) from None


def pld_after(
    st: DatasetState, wire: dict[str, Any], after: PrivacyCurve, work: PldWork | None = None
) -> tuple[Pld, Spend]:
    """On a ``pld`` dataset, its PLD with one more entry of mechanism ``wire`` (holds not
    counted) and its spend, ``after`` being the composed curve with that entry (``work``: as
    ``entry_pld``)."""
    assert st.pld is not None
    state = st.pld.compose(entry_pld(st, wire, work))
    return state, PldFilter(st.filter).spend(state, after)


def decide(st: DatasetState, ask: Ask) -> Decision:
    """Would ``ask`` fit? One dry run: the dataset's filter over the composed curves, or, on a
    ``pld`` dataset, its composed privacy loss distribution; with budget structures (an
    allocation, a block range: ``prepare``), a dry run of each of their tallies too, and the
    ask fits only if every one of them admits it (``decide_structures``)."""
    if st.partition_unit is not None or ask.target is not None:
        return decide_structures(st, ask)
    return _decide_dataset(st, ask)


def _decide_dataset(st: DatasetState, ask: Ask) -> Decision:
    if not st.is_pld:
        dry = st.filter.dry_run(st.committed, st.held_curve, ask.curve, st.held.count + 1)
        return Decision(dry.admitted, dry.after, dry.spend_after)
    assert st.pld is not None
    new = entry_pld(st, ask.wire, request_work())
    p = PldFilter(st.filter).dry_run(
        (st.pld, st.committed), (st.pld_held, st.held_curve), (new, ask.curve), st.held.count + 1
    )
    return Decision(p.admitted, p.after_curve, p.spend_after, new, p.after)


# --- budget structures (issue 15): allocations and time blocks -------------------------------


@dataclass(frozen=True)
class Target:
    """What an ask is charged to besides the dataset's totals: its allocation and the tallies
    of its blocks (the dataset's; the allocation's, on a partitioned dataset)."""

    allocation: Tally | None
    blocks: tuple[Tally, ...]
    allocation_blocks: tuple[Tally, ...]
    block_from: str | None
    block_to: str | None

    def tallies(self) -> tuple[Tally, ...]:
        head = (self.allocation,) if self.allocation is not None else ()
        return head + self.blocks + self.allocation_blocks


def prepare(session: Session, st: DatasetState, ask: Ask) -> Ask:
    """``ask`` with its allocation and blocks resolved into tallies, under the dataset's lock;
    422 for an unknown allocation, blocks on a dataset that is not partitioned, no blocks on
    one that is, or a bad range (``blocks.block_range``). Reads O(blocks) rows."""
    unit = st.partition_unit
    if ask.blocks is not None and unit is None:
        raise Unprocessable(
            f"dataset {st.name!r} is not partitioned: 'blocks' applies only to datasets "
            "created with a 'partition'"
        )
    if ask.blocks is None and unit is not None:
        raise Unprocessable(
            f"dataset {st.name!r} is partitioned by {unit}: give the blocks the charge reads, "
            "'blocks': {'from': <key>, 'to': <key>} (inclusive)",
            partition_unit=unit,
        )
    if ask.allocation is None and ask.allocation_id is None and ask.blocks is None:
        return ask
    if st.is_pld:
        raise Unprocessable("allocations are not available on 'pld' datasets")
    keys = blocks.block_range(unit, *ask.blocks) if unit is not None and ask.blocks else []
    tallies = st.tallies()
    allocation = None
    if ask.allocation is not None:
        allocation = tallies.allocation(session, ask.allocation)
    elif ask.allocation_id is not None:
        allocation = tallies.allocation_by_id(session, ask.allocation_id)
    check_allocation_entry_delta(st, ask.kind, ask.curve.delta, allocation)
    block_tallies: list[Tally] = []
    allocation_blocks: list[Tally] = []
    if keys:
        block_tallies = tallies.blocks(session, BLOCK, st.id, keys, st.filter)
        new = [str(t.key) for t in block_tallies if not t.exists]
        if new:  # bounded: an index count of at most MAX_BLOCKS rows (the lock is held)
            assert unit is not None
            stored = session.scalar(
                select(func.count())
                .select_from(DatasetBlock)
                .where(DatasetBlock.dataset_id == st.id)
            )
            blocks.check_block_count(unit, int(stored or 0), new)
        if allocation is not None:
            allocation_blocks = tallies.blocks(
                session, ALLOCATION_BLOCK, allocation.owner, keys, allocation.filter
            )
    target = Target(
        allocation,
        tuple(block_tallies),
        tuple(allocation_blocks),
        keys[0] if keys else None,
        keys[-1] if keys else None,
    )
    return replace(ask, allocation_id=allocation.owner if allocation else None, target=target)


def totals_filter_spend(st: DatasetState, curve: PrivacyCurve) -> Spend:
    """The spend stored in a dataset's totals row: under its filter, or on a partitioned
    dataset (whose totals compose every block's charges) under its lifetime budget's filter
    when it has one."""
    return st.totals_filter.spend(curve)


def decide_structures(st: DatasetState, ask: Ask) -> Decision:
    """The dataset's check (on a partitioned dataset: its lifetime budget, if any, over the
    composition of all charges) and one dry run per tally of the ask's target: admitted iff
    all admit. On a partitioned dataset an allocation's budget applies to each block, like the
    dataset's; elsewhere to the allocation's whole ledger."""
    target = ask.target
    limits: list[str] = []
    if st.partition_unit is None:
        base = _decide_dataset(st, ask)
        if not base.admitted:
            limits.append("dataset")
    else:
        after = st.committed + ask.curve
        if st.lifetime is not None:
            life = st.lifetime.dry_run(st.committed, st.held_curve, ask.curve, st.held.count + 1)
            base = Decision(life.admitted, life.after, life.spend_after)
            if not life.admitted:
                limits.append("lifetime")
        else:
            base = Decision(True, after, st.filter.spend(after))
    checks: list[tuple[Tally, DryRun]] = []
    exceeded: list[str] = []
    allocation_exceeded: list[str] = []
    if target is not None:
        for t in target.blocks:
            d = t.dry_run(ask.curve)
            checks.append((t, d))
            if not d.admitted:
                exceeded.append(str(t.key))
        for t in target.allocation_blocks:
            d = t.dry_run(ask.curve)
            checks.append((t, d))
            if not d.admitted:
                allocation_exceeded.append(str(t.key))
        if target.allocation is not None:
            a = target.allocation
            if st.partition_unit is None:
                d = a.dry_run(ask.curve)
                if not d.admitted:
                    limits.append("allocation")
            else:  # its budget applies per block: its totals only record the composition
                after_a = a.committed + ask.curve
                d = DryRun(True, after_a, a.filter.spend(after_a))
            checks.append((a, d))
    if exceeded:
        limits.insert(0, "dataset")
    if allocation_exceeded:
        limits.append("allocation")
    return replace(
        base,
        admitted=not limits,
        checks=tuple(checks),
        limits=tuple(dict.fromkeys(limits)),
        blocks_exceeded=tuple(exceeded),
        allocation_blocks_exceeded=tuple(allocation_exceeded),
    )


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
    checks: tuple[tuple[Tally, DryRun], ...] = (),
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
        "allocation_id": ask.allocation_id,
        "block_from": ask.target.block_from if ask.target is not None else None,
        "block_to": ask.target.block_to if ask.target is not None else None,
    }
    for tally, d in checks:  # the ask's allocation and blocks (budget structures)
        tally.record(d.after, d.spend_after)
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
    conn = session.connection()
    totals = (
        state.saved_totals(st, now)
        if st.totals_with_entry and conn.dialect.name == "postgresql"
        else None
    )
    if totals is not None:  # the totals are written with the entry (``state.save`` skips them)
        params = {"e_" + k: values[k] for k in _ENTRY_COLUMNS}
        entry_id = conn.execute(_INSERT_ENTRY_SAVING, {**params, **totals}).scalar_one()
    elif st.entry_ids:  # inserted with the group's others when it ends (``locked``)
        entry_id = st.entry_ids.popleft()
        st.pending_entries.append({**values, "id": entry_id})
    else:
        entry_id = conn.execute(_INSERT_ENTRY, values).scalar_one()
    allocation = ask.target.allocation if ask.target is not None else None
    return answers.entry(
        {
            **values,
            "id": entry_id,
            "key_name": ask.key_name,
            "allocation_name": allocation.name if allocation is not None else None,
        }
    )


def append_held(
    session: Session,
    st: DatasetState,
    hold: Reservation,
    source: EntrySource,
    now: datetime,
    *,
    recompose: bool = True,
) -> r.Entry:
    """Charge a reservation's hold into the ledger and take it out of the held sum (and out
    of its allocation's and blocks', into their totals). ``recompose=False``: the caller
    composes a ``pld`` dataset's remaining holds once after a batch (``recompose_held``)."""
    ask = prepare_held(session, st, Ask.of_hold(hold))
    after = st.committed + ask.curve
    state = None
    if st.is_pld:
        state, spend_after = pld_after(st, ask.wire, after)
    else:
        spend_after = totals_filter_spend(st, after)
    entry = append(
        session,
        st,
        ask,
        after,
        spend_after,
        source=source,
        reservation_id=hold.id,
        now=now,
        pld_after=state,
    )
    _unhold(session, st, hold, ask.curve, recompose=recompose)
    if ask.target is not None:
        for tally in ask.target.tallies():
            tally.record_held(ask.curve)
    hold.resolved_at = now
    hold.ledger_entry_id = entry.id
    return entry


def prepare_held(session: Session, st: DatasetState, ask: Ask) -> Ask:
    """A held ask's allocation and blocks as tallies (they were checked when it was held)."""
    if ask.allocation_id is None and ask.blocks is None:
        return ask
    if st.partition_unit is None:  # never: a dataset's partition is fixed at creation
        ask = replace(ask, blocks=None)
    return prepare(session, st, ask)


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
        allocation_id=ask.allocation_id,
        block_from=ask.target.block_from if ask.target is not None else None,
        block_to=ask.target.block_to if ask.target is not None else None,
    )
    session.add(row)
    if ask.target is not None:
        for tally in ask.target.tallies():
            tally.hold(ask.curve)
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
    """Free a hold: its budget leaves the held sum (nothing enters the ledger). Its tallies
    are found before anything is written (``prepare_held`` may refuse)."""
    curve = curve_of(hold)
    ask = prepare_held(session, st, Ask.of_hold(hold))
    _unhold(session, st, hold, curve)
    if ask.target is not None:
        for tally in ask.target.tallies():
            tally.unhold(curve)


def _unhold(
    session: Session,
    st: DatasetState,
    hold: Reservation,
    curve: PrivacyCurve,
    *,
    recompose: bool = True,
) -> None:
    others = (_R.dataset_id == st.id, _R.status == ReservationStatus.ACTIVE, _R.id != hold.id)
    st.held = st.held.remove(curve)
    st.held_next_expiry = session.scalar(select(func.min(_R.expires_at)).where(*others))
    if recompose:
        recompose_held(session, st, hold.id)
    st.dirty = True


def recompose_held(session: Session, st: DatasetState, without: str | None = None) -> None:
    """A ``pld`` dataset's held PLD composed again from its active holds (``without`` one
    being resolved): a PLD cannot be subtracted, so this is O(holds) compositions; a batch of
    expiries calls it once, not once per hold (100 due holds took 12 s under the lock). What it
    costs is bounded by ``check_holds_work``, which every reservation passed."""
    if not st.is_pld:
        return
    st.pld_held, st.pld_dirty = held_pld(session, st, without=without), True


def held_pld(
    session: Session,
    st: DatasetState,
    *,
    without: str | None = None,
    adding: Mapping[str, Any] | None = None,
    work: PldWork | None = None,
) -> Pld | None:
    """The composed PLD of a ``pld`` dataset's active holds (``without`` one, with a new one of
    mechanism ``adding`` last), None when there is none. ``work``: as ``entry_pld``, charged for
    the constructions (what the cache says each took, built or not) and the compositions."""
    assert st.pld is not None
    active = (_R.dataset_id == st.id, _R.status == ReservationStatus.ACTIVE)
    q = select(_R.mechanism).where(*active).order_by(_R.created_at, _R.id)
    if without is not None:
        q = q.where(_R.id != without)
    mechanisms: list[Mapping[str, Any]] = [*session.scalars(q).all()]
    if adding is not None:
        mechanisms.append(adding)
    composed: Pld | None = None
    for m in mechanisms:
        entry = entry_pld(st, dict(m), work)
        composed = entry if composed is None else composed.compose(entry, work)
    return composed


def check_holds_work(session: Session, st: DatasetState, wire: Mapping[str, Any]) -> None:
    """422 (``PldWorkRefused``, nothing held) when holding ``wire`` on a ``pld`` dataset would
    make its active holds more than one request may compose: resolving any hold (commit,
    release, expiry) composes the others again (``recompose_held``), building each distribution
    the construction cache lacks (after a restart, on another worker or replica). Priced here
    as that recomposition with the new hold, on one request's meter (``request_work``): a
    later resolution, which composes a subset of them, stays within ``PLD_WORK_LIMIT``."""
    work = request_work()
    try:
        held_pld(session, st, adding=wire, work=work)
    except (PldWorkRefused, PldWorkExceeded) as exc:
        holds = st.held.count
        raise PldWorkRefused(
            f"holding {pld_mechanisms.describe(wire)} beside the {holds} active holds of "
            f"dataset {st.name!r} would take more than the {work.limit:,.0f} units of work one "
            "request may spend on PLDs to compose them again when one of them is committed, "
            "released or expires (a privacy loss distribution cannot be subtracted). Commit "
            "or release active holds first, or charge it without a reservation",
            pld_work_limit=work.limit,
            active_holds=holds,
            accepted_accountings=["rdp"],
        ) from exc


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
        entry = append_held(
            session, st, hold, EntrySource.RESERVATION_EXPIRED, now, recompose=False
        )
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
    if due:
        session.flush()  # the expired holds' status, before the remaining ones are read
        recompose_held(session, st)
    return len(due)


__all__ = [
    "Ask",
    "Decision",
    "Target",
    "decide_structures",
    "prepare",
    "prepare_held",
    "totals_filter_spend",
    "append",
    "append_held",
    "aware",
    "check_allowed",
    "check_not_archived",
    "decide",
    "PldWorkRefused",
    "entry_pld",
    "request_work",
    "warm_pld",
    "pld_after",
    "check_holds_work",
    "held_pld",
    "hold",
    "locked",
    "release_hold",
    "run_locked",
    "settle",
]
