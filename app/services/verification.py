"""Verifying and rebuilding a dataset's totals from its ledger (``privacy-ledger verify``,
``POST /v1/admin/verify``).

The ledger is the source of truth. ``verify`` recomputes a dataset's totals from its entries
(summing the stored entry curves in ledger order with the same round-up additions the charge
path used, so a consistent database matches bit for bit), re-derives each entry's curve from its
stored mechanism to catch drift in the formulas or the order grid, and checks the held sum
against the active reservations. It reads and rewrites each dataset under that dataset's lock,
so charges racing a rebuild are neither lost nor double counted.
"""

from __future__ import annotations

import hashlib
import json
import math
import operator
import struct
import weakref
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from typing import cast as cast_type

import numpy as np
from sqlalchemy import ColumnElement, Table, Text, bindparam, cast, func, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app import responses as r
from app.accounting.compose import RangeSums, compose_in_order, compose_ranges
from app.accounting.curve import PrivacyCurve, Vector
from app.accounting.filters import Spend
from app.accounting.kinds import UnitCurves
from app.accounting.mechanisms import Mechanism, mechanism_from_dict
from app.accounting.orders import CURVE_FORMULAS_VERSION, ORDERS
from app.accounting.pld import Pld
from app.accounting.pld_filter import PldFilter
from app.accounting.running import RunningSum
from app.db.codec import curve_columns, curve_of, rdp_from_bytes
from app.db.engine import Database
from app.db.models import (
    Allocation,
    AllocationBlock,
    AppSetting,
    Dataset,
    DatasetBlock,
    LedgerEntry,
    Reservation,
    ReservationStatus,
)
from app.errors import DatabaseUnavailable
from app.principal import SYSTEM, Caller, Principal
from app.services import admission, audit, blocks, state
from app.services.auth import authenticated
from app.services.state import DatasetState
from app.services.tallies import (
    ALLOCATION,
    ALLOCATION_BLOCK,
    BLOCK,
    Tally,
    allocation_columns,
)

_L = LedgerEntry.__table__.c
_R = Reservation.__table__.c

READ_CHUNK = 10_000
"""Ledger rows fetched per query by verify: bounded memory, few round trips."""

CHECK_CHUNK = 2_048
"""Distinct entries whose curves verify recomputes and compares at a time: the arrays of one
chunk (2,048 x |ORDERS| doubles, 4 MB) stay in cache; 100,000 at once cost seconds in page
faults alone."""

LISTED_MISMATCHES = 100
"""At most this many ids of entries (and of holds) with a stale curve are listed in a verify
report and in the ``totals.rebuilt`` audit event, the first by ledger position; the count and
the ledger seq range of all of them stand beside. Listing every id made one event for 100,000
re-derived entries 689 KB, and one audit page of such events hundreds of MB."""

Progress = Callable[[int, int], None]
"""``progress(done, total)``: units of verify's work done so far, out of ``total`` (each
ledger entry counts twice: the curve check, then the sum under the lock; an entry of a ``pld``
dataset three times: its distribution is recomposed too)."""


def _rows(
    s: Any, dataset_id: str, *columns: Any, where: ColumnElement[bool] | None = None
) -> Iterator[Sequence[Any]]:
    """The ledger's rows (only ``columns``; only those matching ``where``), in ledger order,
    ``READ_CHUNK`` at a time: keyset pages on ``seq`` (bounded memory; no server-side cursor,
    which PostgreSQL's autocommit reads could not hold)."""
    last = 0
    while True:
        q = (
            select(*columns, _L.seq)
            .where(_L.dataset_id == dataset_id, _L.seq > last, *(() if where is None else (where,)))
            .order_by(_L.seq)
            .limit(READ_CHUNK)
        )
        chunk = s.execute(q).all()
        if not chunk:
            return
        yield chunk
        if len(chunk) < READ_CHUNK:
            return
        last = chunk[-1][-1]


def _stored_curves(chunk: Sequence[Any], first: int) -> UnitCurves:
    """Entry curves from rows whose columns ``first`` .. ``first + 5`` are rho, rdp, pure_eps,
    gaussian_only, delta, orders_version (the codec's checks, all rows at once)."""
    versions = {row[first + 5] for row in chunk}
    for version in versions:
        rdp_from_bytes(chunk[0][first + 1], version)  # refuses another order grid
    blob = b"".join(row[first + 1] for row in chunk)
    rdp = np.frombuffer(blob, dtype="<f8").astype(np.float64)
    if rdp.size != len(chunk) * ORDERS.size:
        raise RuntimeError(f"stored curves do not all have {ORDERS.size} orders")
    return UnitCurves(
        rho=np.array([row[first] for row in chunk], dtype=np.float64),
        rdp=rdp.reshape(len(chunk), ORDERS.size),
        pure_eps=np.array([row[first + 2] for row in chunk], dtype=np.float64),
        delta=np.array([row[first + 4] for row in chunk], dtype=np.float64),
        gaussian_only=np.array([bool(row[first + 3]) for row in chunk], dtype=bool),
    )


_CURVE_COLUMNS = (_L.rho, _L.rdp, _L.pure_eps, _L.gaussian_only, _L.delta, _L.orders_version)


Mask = np.ndarray[Any, np.dtype[np.bool_]]


def _close(fresh: Vector, stored: Vector, slack: Vector | float = 0.0) -> Mask:
    """Elementwise ``math.isclose(fresh, stored, rel_tol=1e-12)`` (infinities equal), each
    pair also allowed to differ by ``slack`` more."""
    with np.errstate(invalid="ignore"):
        tol = 1e-12 * np.maximum(np.abs(fresh), np.abs(stored)) + slack
        close: Mask = (fresh == stored) | (np.abs(fresh - stored) <= tol)
    return close


def _stale(fresh_rho: Vector, fresh_rdp: Vector, stored_rho: Vector, stored_rdp: Vector) -> Mask:
    """Rows whose stored curve is not their mechanism's fresh one (rho or any order's RDP)."""
    return ~(_close(fresh_rho, stored_rho) & _close(fresh_rdp, stored_rdp).all(axis=1))


def _stale_curves(mechanisms: list[Mechanism], stored_rho: Vector, stored_rdp: Vector) -> Mask:
    """``_stale`` against the mechanisms' fresh curves, where an RDP value may also differ by
    twice what its kind says another CPU's evaluation can (``Mechanism.unit_spreads``: a
    DP-SGD value at a tiny sample rate is certified to a few parts in a million, not to 1e-12,
    and its last bits follow the CPU's exp and log). The spreads are computed only for the rows
    that differ by more than 1e-12."""
    fresh_rho, fresh_rdp = _fresh_curves(mechanisms)
    stale = _stale(fresh_rho, fresh_rdp, stored_rho, stored_rdp)
    suspects = [i for i in np.flatnonzero(stale).tolist() if _close(fresh_rho[i], stored_rho[i])]
    spreads = _fresh_spreads([mechanisms[i] for i in suspects])
    for i, spread in zip(suspects, spreads, strict=True):
        if spread is not None:
            stale[i] = not bool(_close(fresh_rdp[i], stored_rdp[i], 2.0 * spread).all())
    return stale


def _by_kind(mechanisms: list[Mechanism]) -> dict[type[Mechanism], list[int]]:
    """The positions of each kind's mechanisms, in order."""
    by_kind: dict[type[Mechanism], list[int]] = {}
    for i, m in enumerate(mechanisms):
        by_kind.setdefault(type(m), []).append(i)
    return by_kind


def _fresh_spreads(mechanisms: list[Mechanism]) -> list[Vector | None]:
    """Each mechanism's ``unit_spreads`` times its repetitions (None: its kind has none), the
    units of a kind computed together."""
    out: list[Vector | None] = [None] * len(mechanisms)
    for cls, where in _by_kind(mechanisms).items():
        spreads = cls.unit_spreads([mechanisms[i].unit() for i in where])
        if spreads is not None:
            for row, i in enumerate(where):
                out[i] = spreads[row] * float(mechanisms[i].repetitions())
    return out


def _fresh_curves(mechanisms: list[Mechanism]) -> tuple[Vector, Vector]:
    """rho (n,) and RDP (n, |ORDERS|) of ``mechanisms`` as ``Mechanism.curve()`` gives them to
    within its last rounding: each kind's unit curves computed together (the same numbers as one
    by one), times the repetitions."""
    n = len(mechanisms)
    rho, rdp = np.empty(n), np.empty((n, ORDERS.size))
    for cls, where in _by_kind(mechanisms).items():
        for start in range(0, len(where), READ_CHUNK):
            part = where[start : start + READ_CHUNK]
            units = cls.unit_curves([mechanisms[i].unit() for i in part])
            reps = np.array([float(mechanisms[i].repetitions()) for i in part])
            with np.errstate(over="ignore", invalid="ignore"):
                rho[part] = units.rho * reps
                rdp[part] = units.rdp * reps[:, None]
    return rho, rdp


def _curve_mismatches(
    reading: Callable[[], AbstractContextManager[Any]],
    dataset_id: str,
    tick: Callable[[int], None],
    after: int = 0,
) -> tuple[list[tuple[int, int]], int]:
    """(id, seq) of entries after entry ``after``, in ledger order, whose stored curve no longer
    matches the curve of their mechanism (drift in the formulas or the order grid), and the seq
    of the last entry checked (``after`` when none). Entries never change, so ``verify`` runs
    this outside the lock (``reading``: ``Database.read``), each page of ``READ_CHUNK`` rows
    read in its own short read and checked before the next is read: progress moves with the
    check (the costly part: 100,000 distinct randomized responses take 15 s, DP-SGD runs
    160 s), and only a page's mechanisms are held, with a 16-byte digest and verdict per
    distinct (mechanism, stored curve) seen before. Rows with the same mechanism and stored
    curve are checked once. Under the lock it checks the entries charged since: a hold stores
    its curve and is charged with it, so a hold of an older release committed or expired since
    (or settled by the lock itself) is such an entry."""
    verdicts: dict[bytes, bool] = {}  # digest of (mechanism, rho, rdp) -> stale
    bad: list[tuple[int, int]] = []
    text = cast(_L.mechanism, Text)
    last = after
    while True:
        with reading() as s:
            chunk = s.execute(
                select(_L.id, text, _L.rho, _L.rdp, _L.orders_version, _L.seq)
                .where(_L.dataset_id == dataset_id, _L.seq > last)
                .order_by(_L.seq)
                .limit(READ_CHUNK)
            ).all()
        if not chunk:
            break
        for version in {row[4] for row in chunk}:
            rdp_from_bytes(chunk[0][3], version)  # refuses another order grid
        if any(len(row[3]) != ORDERS.size * 8 for row in chunk):
            raise RuntimeError(f"stored curves do not all have {ORDERS.size} orders")
        digests = [_digest(row[1], row[2], row[3]) for row in chunk]
        new: dict[bytes, Sequence[Any]] = {}
        for d, row in zip(digests, chunk, strict=True):
            if d not in verdicts:
                new.setdefault(d, row)
        keys = list(new)
        for start in range(0, len(keys), CHECK_CHUNK):
            part = [new[d] for d in keys[start : start + CHECK_CHUNK]]
            stored_rho = np.array([row[2] for row in part], dtype=np.float64)
            stored_rdp = np.frombuffer(b"".join(row[3] for row in part), dtype="<f8").reshape(
                len(part), ORDERS.size
            )
            mechanisms = [mechanism_from_dict(json.loads(row[1])) for row in part]
            stale = _stale_curves(mechanisms, stored_rho, stored_rdp)
            verdicts.update(zip(keys[start : start + CHECK_CHUNK], stale.tolist(), strict=True))
        bad += [(row[0], row[5]) for d, row in zip(digests, chunk, strict=True) if verdicts[d]]
        tick(len(chunk))
        last = chunk[-1][-1]
        if len(chunk) < READ_CHUNK:
            break
    return bad, last


def _digest(mechanism: str, rho: float, rdp: bytes) -> bytes:
    """What identifies an entry for the curve check: its mechanism and its stored curve."""
    h = hashlib.blake2b(mechanism.encode(), digest_size=16)
    h.update(struct.pack("<d", rho))
    h.update(rdp)
    return h.digest()


def _mismatch_summary(entries: list[tuple[int, int]], hold_ids: list[str]) -> dict[str, Any]:
    """What a verify report and a ``totals.rebuilt`` event say of the stale curves, bounded by
    ``LISTED_MISMATCHES``: the first ids by ledger position, how many there are, whether the
    list is cut, and the seq range that holds all of them (not every entry in it is stale)."""
    seqs = [seq for _, seq in entries]
    return {
        "entries": [entry_id for entry_id, _ in entries[:LISTED_MISMATCHES]],
        "entries_count": len(entries),
        "entries_truncated": len(entries) > LISTED_MISMATCHES,
        "entries_seq_range": [min(seqs), max(seqs)] if seqs else None,
        "holds": hold_ids[:LISTED_MISMATCHES],
        "holds_count": len(hold_ids),
        "holds_truncated": len(hold_ids) > LISTED_MISMATCHES,
    }


def _active_holds(s: Any, dataset_id: str) -> list[Reservation]:
    """The dataset's active holds, in creation order (read under its lock)."""
    return list(
        s.scalars(
            select(Reservation)
            .where(_R.dataset_id == dataset_id, _R.status == ReservationStatus.ACTIVE)
            .order_by(_R.created_at, _R.id)
        )
    )


def _held_mismatches(holds: list[Reservation]) -> list[Reservation]:
    """The holds whose stored curve no longer matches their mechanism (a hold made by an older
    release, before a formula was corrected): ``_curve_mismatches``' test, curves of a kind
    computed together."""
    if not holds:
        return []
    stored = [curve_of(h) for h in holds]
    stale = _stale_curves(
        [mechanism_from_dict(h.mechanism) for h in holds],
        np.array([c.rho for c in stored], dtype=np.float64),
        np.vstack([c.rdp for c in stored]),
    )
    return [h for h, old in zip(holds, stale, strict=True) if old]


def _fresh_columns(mechanisms: list[Mechanism]) -> list[dict[str, Any]]:
    """The curve columns of each of ``mechanisms`` as ``Mechanism.curve()`` gives them: each
    kind's unit curves computed together (the same numbers as one by one), then repeated.
    One by one, a distinct randomized response with k >= 7 costs 9 ms (its rho is a numerical
    supremum), 5,000 of them 48 s of CPU under the dataset's lock."""
    out: list[dict[str, Any]] = [{} for _ in mechanisms]
    for cls, where in _by_kind(mechanisms).items():
        for start in range(0, len(where), READ_CHUNK):
            part = where[start : start + READ_CHUNK]
            units = cls.unit_curves([mechanisms[i].unit() for i in part])
            for row, i in enumerate(part):
                out[i] = curve_columns(units.row(row).scaled(mechanisms[i].repetitions()))
    return out


_REDERIVED = (
    update(cast_type(Table, LedgerEntry.__table__))
    .where(_L.id == bindparam("entry_id"))
    .values({name: bindparam("new_" + name) for name in curve_columns(PrivacyCurve.zero())})
)
"""One entry's curve columns rewritten (run as an executemany over a page of entries)."""


def _rederive(s: Any, entry_ids: list[int], holds: list[Reservation]) -> None:
    """Rewrite the stored curves of these entries and holds from their mechanisms (the ledger's
    source of truth) under the current formulas, as migration 0005 did for the order grid: a
    curve stored by an older release whose formula was since found below the exact value (e.g.
    DP-SGD at sigma 0.65, q 1e-6: 14 % below at order 2.6) would otherwise stay in every sum,
    and in the entry a hold's commit makes. Runs under the dataset's lock, before the sums: a
    page of entries at a time, their distinct mechanisms' curves computed together
    (``_fresh_columns``) and written in one executemany."""
    fresh: dict[str, dict[str, Any]] = {}

    def compute(mechanisms: list[Any]) -> list[dict[str, Any]]:
        keys = [json.dumps(m, sort_keys=True) for m in mechanisms]
        new = list(dict.fromkeys(k for k in keys if k not in fresh))
        columns = _fresh_columns([mechanism_from_dict(json.loads(k)) for k in new])
        fresh.update(zip(new, columns, strict=True))
        return [fresh[k] for k in keys]

    conn = s.connection()
    for start in range(0, len(entry_ids), READ_CHUNK):
        part = entry_ids[start : start + READ_CHUNK]
        rows = s.execute(select(_L.id, _L.mechanism).where(_L.id.in_(part))).all()
        columns = compute([mechanism for _, mechanism in rows])
        params = [
            {"entry_id": entry_id, **{"new_" + k: v for k, v in c.items()}}
            for (entry_id, _), c in zip(rows, columns, strict=True)
        ]
        if params:
            conn.execute(_REDERIVED, params)
        fresh.clear()  # bounded memory: a later page recomputes what it shares with this one
    for hold, c in zip(holds, compute([h.mechanism for h in holds]), strict=True):
        for name, value in c.items():
            setattr(hold, name, value)
    s.flush()


def _recomputed(
    s: Any, st: DatasetState, holds: list[Reservation], tick: Callable[[int], None]
) -> tuple[PrivacyCurve, int, dict[str, Any], RunningSum, datetime | None]:
    """From the ledger, read in the caller's transaction (which holds the dataset's lock, so the
    ledger cannot move): the sum of stored entry curves in ledger order (``compose_in_order``:
    bit for bit the charge path's running sum), the entry count and per-kind counts; and the
    held sum of the active reservations ``holds`` and the earliest of their expiries."""
    total = PrivacyCurve.zero()
    n = 0
    counts: dict[str, Any] = {}
    for chunk in _rows(s, st.id, _L.kind, _L.count, *_CURVE_COLUMNS):
        curves = _stored_curves(chunk, 2)
        # the running sum carries on from the previous chunk: prepend it as a row
        total = compose_in_order(
            UnitCurves(
                rho=np.concatenate(([total.rho], curves.rho)),
                rdp=np.vstack((total.rdp[None, :], curves.rdp)),
                pure_eps=np.concatenate(([total.pure_eps], curves.pure_eps)),
                delta=np.concatenate(([total.delta], curves.delta)),
                gaussian_only=np.concatenate(([total.gaussian_only], curves.gaussian_only)),
            )
        )
        n += len(chunk)
        for row in chunk:
            kind, count, rho = row[0], row[1], row[2]
            c = counts.setdefault(kind, {"entries": 0, "count": 0, "rho": 0.0})
            c["entries"] += 1
            c["count"] += count
            c["rho"] = c["rho"] + rho if c["rho"] is not None and math.isfinite(rho) else None
        tick(len(chunk))
    held = RunningSum()
    next_expiry: datetime | None = None
    for h in holds:
        held = held.add(curve_of(h))
        expires = admission.aware(h.expires_at)
        next_expiry = expires if next_expiry is None else min(next_expiry, expires)
    return total, n, counts, held, next_expiry


PLD_TOLERANCE = 1e-2
"""Relative difference in certified epsilon within which a stored PLD matches the ledger's.
The check recomposes identical entries together (``self_compose``: a few convolutions), while
charging composed one entry at a time; the two truncate tails and round at different steps, so
their epsilons differ, either way: by up to 3.3e-4 relative over 60 random 10-100-entry
ledgers and 5.2e-4 over 12 random 1,000-entry ones (1e-6, the tolerance before, flagged healthy
ledgers of 11 entries). Both are pessimistic, so either may be kept. What a ledger holds is
checked exactly besides (entry counts, rho and RDP totals), so a missing or extra entry is found
there; this check finds a distribution that is not the ledger's at all."""


@dataclass(frozen=True)
class _LedgerPld:
    """A ``pld`` dataset's ledger recomposed up to entry ``last_seq`` on the grid ``interval``
    (``extended`` as the dataset's), from ``entries`` entries (``pld`` None: none)."""

    pld: Pld | None
    interval: float
    extended: bool
    last_seq: int
    entries: int


def _mechanism_groups(s: Any, dataset_id: str, after_seq: int) -> tuple[Counter[str], int, int]:
    """The ledger's mechanisms after entry ``after_seq``, identical ones counted together (as
    canonical JSON), read in keyset pages; with the last entry's seq and the entries read."""
    groups: Counter[str] = Counter()
    last, n = after_seq, 0
    for chunk in _rows(s, dataset_id, _L.mechanism, where=_L.seq > after_seq):
        groups.update(json.dumps(row[0], sort_keys=True) for row in chunk)
        last, n = chunk[-1][-1], n + len(chunk)
    return groups, last, n


def _composed(
    st: DatasetState, start: Pld | None, groups: Counter[str], tick: Callable[[int], None]
) -> Pld | None:
    """``start`` (None: nothing yet) composed with every group of identical mechanisms."""
    assert st.pld is not None
    total = start
    for mechanism, n in sorted(groups.items()):
        if total is None:
            total = Pld.identity(st.pld.interval, st.pld.extended)
        total = total.compose(admission.entry_pld(st, json.loads(mechanism)).self_compose(n))
        tick(n)
    return total


def _ledger_pld_unlocked(
    db: Database, dataset_id: str, principal: Principal, tick: Callable[[int], None]
) -> _LedgerPld | None:
    """A ``pld`` dataset's ledger PLD composed before its lock is taken (None: not a ``pld``
    dataset). One construction per distinct entry (2 ms for a Laplace, up to seconds for a
    DP-SGD run): under the lock, which on SQLite is the whole database's, 8,000 distinct entries
    held every charge for 17 s. The ledger is append-only, so what is composed here stays the
    ledger's; ``_ledger_pld`` adds, under the lock, the entries charged since."""
    with db.read() as s:
        st = state.load(s, dataset_id, principal)
        if not st.is_pld:
            return None
        state.load_pld(s, st)
        groups, last, n = _mechanism_groups(s, dataset_id, 0)
    assert st.pld is not None
    return _LedgerPld(_composed(st, None, groups, tick), st.pld.interval, st.pld.extended, last, n)


def _ledger_pld(
    s: Any, st: DatasetState, before: _LedgerPld | None, tick: Callable[[int], None]
) -> Pld | None:
    """Under the dataset's lock: its ledger's PLD, ``before`` (composed outside the lock) with
    the entries charged since, or the whole ledger recomposed when the grid changed since."""
    assert st.pld is not None
    if before is None or (before.interval, before.extended) != (
        st.pld.interval,
        st.pld.extended,
    ):
        groups, _, _ = _mechanism_groups(s, st.id, 0)
        return _composed(st, None, groups, lambda n: None)
    groups, _, _ = _mechanism_groups(s, st.id, before.last_seq)
    return _composed(st, before.pld, groups, tick)


def _held_pld(s: Any, st: DatasetState) -> Pld | None:
    """A ``pld`` dataset's active holds' PLD recomposed (under its lock), identical mechanisms
    grouped."""
    q = select(_R.mechanism).where(_R.dataset_id == st.id, _R.status == ReservationStatus.ACTIVE)
    groups = Counter(json.dumps(m, sort_keys=True) for m in s.scalars(q))
    return _composed(st, None, groups, lambda n: None)


def _pld_drift(st: DatasetState, fresh: Pld | None) -> bool:
    assert st.pld is not None
    if fresh is None:
        return st.entry_count != 0
    return _pld_differs(st, st.pld, fresh)


def _pld_held_drift(st: DatasetState, fresh: Pld | None) -> bool:
    """The stored held PLD against the active holds' (admission composes it with the ledger's:
    one lost or missing there under-counts what is held)."""
    if st.pld_held is None or fresh is None:
        return (st.pld_held is None) != (fresh is None)
    return _pld_differs(st, st.pld_held, fresh)


def _pld_differs(st: DatasetState, stored: Pld, fresh: Pld) -> bool:
    """Certified epsilons at the budget's delta further apart than ``PLD_TOLERANCE``."""
    delta = st.budget.delta
    a, b = stored.epsilon(delta), fresh.epsilon(delta)
    return not math.isclose(a, b, rel_tol=PLD_TOLERANCE, abs_tol=1e-12)


def _expiry_drift(stored: datetime | None, fresh: datetime | None) -> bool:
    """The stored next expiry must be the earliest expiry of the active holds (after ``settle``,
    which ``locked`` ran: none of them is due). Later, or none while holds are active, and
    ``settle`` skips due holds: they are not charged at expiry (fail closed) and their pipeline
    can still commit or release them, a release then dropping budget the expiry should have
    charged."""
    if stored is None or fresh is None:
        return (stored is None) != (fresh is None)
    return admission.aware(stored) != fresh


def _held_drift(stored: RunningSum, fresh: RunningSum) -> bool:
    """Stored held sums are rounded up along their own add/remove history, so they match the
    fresh sum only to within rounding; they must never be below the exact sum. The fresh sum is
    rounded up too, in another order (holds added in lock order, re-read by time, and server
    clocks differ): each of its ``count`` additions raised it by at most one part in 2^52, so
    the exact sum is at least fresh (1 - (count + 1) 2^-52), the floor a stored sum must reach
    (a strict fresh-order comparison reported one-ulp 'drift' on consistent databases).

    Every member admission reads is compared: the counts exactly (of holds, of non-Gaussian
    holds, which switch a filter's exact Gaussian rule off, and of infinite parts), and the
    pure-DP and delta sums like rho. A held pure_eps drifted to 0 with count, rho and RDP intact
    passed, and admission then let a ledger reach epsilon 1.0999993 on a budget of 1.

    No finite member is checked from above. A removal leaves the ulps of the largest sum the
    holds ever reached: a hold of RDP 1e5 at a high order released beside one of 0.085 left
    0.085 + 8.6e-11, which a relative test of 1e-9 reported as drift on a consistent database
    (``verify`` exit 1, ``--rebuild`` rewriting sums that had not drifted). How large that
    excess may be depends on the holds' history, which the sum does not keep; an excess only
    holds back more budget than the holds need, and a missing or repeated removal changes the
    exact counts above."""
    a, b = stored.total(), fresh.total()
    if a is None or b is None:
        return (a is None) != (b is None)
    floor = 1.0 - (fresh.count + 1) * 2.0**-52
    return bool(
        stored.count != fresh.count
        or stored.non_gaussian != fresh.non_gaussian
        or stored.rho_inf != fresh.rho_inf
        or stored.pure_inf != fresh.pure_inf
        or not np.array_equal(stored.rdp_inf, fresh.rdp_inf)
        or stored.rho < fresh.rho * floor
        or stored.pure_eps < fresh.pure_eps * floor
        or stored.delta < fresh.delta * floor
        or (a.rdp < b.rdp * floor).any()
    )


# --- budget structures (issue 15) -------------------------------------------------------------


_STRUCTURE_COLUMNS = (_L.allocation_id, _L.block_from, _L.block_to, *_CURVE_COLUMNS)
_GROUPED = operator.itemgetter(slice(0, len(_STRUCTURE_COLUMNS)))

_FAMILY = 1 << 24
"""Block positions of every owner on one line: the dataset's blocks at their position, the
blocks of allocation i at (i + 1) x 2^24 + position (a block's position, at most a day's
proleptic ordinal, 3,652,059 for 9999-12-31, stays below 2^24)."""


@dataclass(frozen=True)
class _StructureSums:
    """Bounds on every allocation and block tally's sum recomputed from the ledger (what
    ``compose_ranges`` gives: each allocation at its index in ``allocations``, every block
    on the line of ``_FAMILY``)."""

    dataset_id: str
    unit: str | None
    allocations: dict[str, int]
    totals: RangeSums
    blocks: RangeSums

    def find(self, ident: tuple[str, str, str | None]) -> tuple[RangeSums, int | None]:
        """The sums holding tally ``ident`` and its segment (None: no entry reaches it)."""
        kind, owner, key = ident
        if kind == ALLOCATION:
            i = self.allocations.get(owner)
            return self.totals, None if i is None else self.totals.segment(i)
        family = 0 if kind == BLOCK else self.allocations.get(owner, -1) + 1
        if self.unit is None or key is None or (family == 0 and kind != BLOCK):
            return self.blocks, None
        return self.blocks, self.blocks.segment(family * _FAMILY + blocks.check_key(self.unit, key))

    def charged(self) -> set[tuple[str, str, str | None]]:
        """Every tally some entry was charged to: O(allocations + blocks charged)."""
        out: set[tuple[str, str, str | None]] = {
            (ALLOCATION, a, None)
            for a, i in self.allocations.items()
            if (j := self.totals.segment(i)) is not None and self.totals.entries[j] > 0
        }
        owners = sorted(self.allocations, key=self.allocations.__getitem__)
        edges = self.blocks.edges.tolist()
        for j in np.flatnonzero(self.blocks.entries > 0).tolist():
            for position in range(edges[j], edges[j + 1]):
                family, at = divmod(position, _FAMILY)
                key = blocks.key_at(str(self.unit), at)
                out.add(
                    (BLOCK, self.dataset_id, key)
                    if family == 0
                    else (ALLOCATION_BLOCK, owners[family - 1], key)
                )
        return out


def _structure_sums(s: Any, st: DatasetState) -> tuple[_StructureSums, dict[Any, RunningSum]]:
    """Each tally's sum recomputed from the ledger's stored entry curves, and each tally's held
    sum from the active reservations. Keys: (kind, owner, block key).

    The ledger is read in keyset pages of the columns needed; identical (curve, allocation,
    range) entries are counted once and summed per block by ``compose_ranges``: O(entries +
    blocks) work, where adding each entry's curve to each block of its range cost entries x
    span (1,000 entries of 31-day ranges: 63,000 curve additions under the dataset's lock).
    Those sums are bounds on the exact sum, not the running totals' own bits (a running total
    is added in ledger order, block by block): ``RangeSums.holds`` compares within rounding."""
    unit = st.partition_unit
    same: Counter[tuple[Any, ...]] = Counter()  # identical rows (the seq column left out)
    charged = or_(_L.allocation_id.is_not(None), _L.block_from.is_not(None))
    for chunk in _rows(s, st.id, *_STRUCTURE_COLUMNS, where=charged):
        same.update(map(_GROUPED, chunk))
    curves: dict[tuple[Any, ...], int] = {}
    groups: dict[tuple[int, str | None, str | None, str | None], int] = {}
    for row, n in same.items():
        c = curves.setdefault(row[3:9], len(curves))
        groups[(c, row[0], row[1], row[2])] = n
    allocations = {a: i for i, a in enumerate(sorted({g[1] for g in groups if g[1]}))}
    positions: dict[str, int] = {}

    def position(key: str) -> int:
        p = positions.get(key)
        if p is None:
            p = positions[key] = blocks.check_key(str(unit), key)
        return p

    totals: list[tuple[int, int, int, int]] = []  # (curve, count, first, last)
    spans: list[tuple[int, int, int, int]] = []
    for (c, allocation_id, first, last), n in groups.items():
        if allocation_id is not None:
            i = allocations[allocation_id]
            totals.append((c, n, i, i))
        if unit is not None and first is not None and last is not None:
            a, b = position(first), position(last)
            spans.append((c, n, a, b))
            if allocation_id is not None:
                base = (allocations[allocation_id] + 1) * _FAMILY
                spans.append((c, n, base + a, base + b))
    distinct = _stored_curves(list(curves), 0) if curves else None

    def summed(parts: list[tuple[int, int, int, int]]) -> RangeSums:
        table = np.array(parts, dtype=np.int64).reshape(len(parts), 4)
        if distinct is None:
            return compose_ranges(UnitCurves.stack([]), *table.T)
        return compose_ranges(distinct, *table.T)

    sums = _StructureSums(st.id, unit, allocations, summed(totals), summed(spans))
    held: dict[Any, RunningSum] = {}
    for h in s.scalars(
        select(Reservation)
        .where(_R.dataset_id == st.id, _R.status == ReservationStatus.ACTIVE)
        .order_by(_R.created_at, _R.id)
    ):
        targets: list[Any] = []
        if h.allocation_id is not None:
            targets.append((ALLOCATION, h.allocation_id, None))
        if unit is not None and h.block_from is not None and h.block_to is not None:
            for k in blocks.block_range(unit, h.block_from, h.block_to):
                targets.append((BLOCK, st.id, k))
                if h.allocation_id is not None:
                    targets.append((ALLOCATION_BLOCK, h.allocation_id, k))
        for t in targets:
            held[t] = held.get(t, RunningSum()).add(curve_of(h))
    return sums, held


def _verify_structures(s: Any, st: DatasetState, rebuild: bool) -> list[str]:
    """Compare every allocation and block tally of the locked dataset with the ledger; on
    ``rebuild`` rewrite the ones that drifted (saved when the lock is released). The drifted
    tallies, named ``allocation:<name>``, ``block:<key>``, ``allocation_block:<name>/<key>``."""
    allocation_rows = s.execute(
        allocation_columns().where(Allocation.dataset_id == st.id).order_by(Allocation.id)
    ).all()
    if not allocation_rows and st.partition_unit is None:
        return []
    sums, held = _structure_sums(s, st)
    tallies = st.tallies()
    names: dict[str, str] = {}
    found: list[Tally] = []
    for row in allocation_rows:
        a = tallies.allocation(s, row.name)
        names[a.owner] = row.name
        found.append(a)
    wanted = sums.charged() | set(held) | {(t.kind, t.owner, t.key) for t in found}
    block_keys: list[str] = [k for kind, _, k in wanted if kind == BLOCK and k is not None]
    stored_blocks = list(
        s.scalars(select(DatasetBlock.key).where(DatasetBlock.dataset_id == st.id))
    )
    block_keys = sorted(set(block_keys) | set(stored_blocks))
    if block_keys:
        found += tallies.blocks(s, BLOCK, st.id, block_keys, st.filter)
    for a in [t for t in found if t.kind == ALLOCATION]:
        keys: set[str] = {
            k
            for kind, owner, k in wanted
            if kind == ALLOCATION_BLOCK and owner == a.owner and k is not None
        }
        keys |= set(
            s.scalars(select(AllocationBlock.key).where(AllocationBlock.allocation_id == a.owner))
        )
        if keys:
            found += tallies.blocks(s, ALLOCATION_BLOCK, a.owner, sorted(keys), a.filter)
    drifted: list[str] = []
    for t in found:
        ident = (t.kind, t.owner, t.key)
        part, j = sums.find(ident)
        n = 0 if j is None else int(part.entries[j])
        fresh_held = held.get(ident, RunningSum())
        if (
            t.entry_count != n
            or not part.holds(j if n else None, t.committed, n)
            or _held_drift(t.held, fresh_held)
            or t.held_count_drift
            # what the tally's views report, from its curve as it stands (converted only
            # where the cheaper checks found nothing)
            or _spend_drift(t.spent, t.filter.spend(t.committed))
        ):
            name = names.get(t.owner, t.owner)
            drifted.append(
                f"{t.kind}:{name}" + (f"/{t.key}" if t.kind == ALLOCATION_BLOCK else "")
                if t.kind != BLOCK
                else f"block:{t.key}"
            )
            if rebuild:
                total = part.upper_curve(j) if j is not None and n else PrivacyCurve.zero()
                t.committed, t.entry_count, t.held = total, n, fresh_held
                t.spent = t.filter.spend(total)
                t.dirty = True
    return drifted


def _spend_of(st: DatasetState, total: PrivacyCurve, pld: Pld | None) -> Spend:
    """The spend the totals row should hold for a ledger composing to ``total`` (and, on a
    ``pld`` dataset, to the distribution ``pld``): what the charge path stores after each entry."""
    if st.is_pld:
        assert pld is not None
        return PldFilter(st.filter).spend(pld, total)
    return admission.totals_filter_spend(st, total)


def _spend_drift(stored: Spend, fresh: Spend) -> bool:
    """Whether a stored spend is not the one recomputed from the ledger: its epsilon differs by
    more than ``_close``'s 1e-12 (the conversions' logarithms and exponentials may differ in
    their last ulps between the machines of one deployment, as entry curves may), or its method
    is another whose own candidate is not that close to the epsilon (where two conversions tie
    to within ulps, either may come out least)."""
    if not _close(np.array([fresh.epsilon]), np.array([stored.epsilon]))[0]:
        return True
    if stored.method == fresh.method:
        return False
    other = fresh.candidates.get(stored.method)
    return other is None or not _close(np.array([fresh.epsilon]), np.array([other]))[0]


COUNTS_RHO_TOLERANCE = 1e-9
"""Relative tolerance on a kind's rho sum in ``mechanism_counts`` (a display figure, summed
entry by entry in the charge path: the same additions in the same order, bar a rho that
overflowed, which either side may keep as null or infinity)."""


def _counts_drift(stored: dict[str, Any], recomputed: dict[str, Any]) -> bool:
    """Whether the stored per-kind counts differ from the ledger's: entries and count exactly,
    the rho sum within ``COUNTS_RHO_TOLERANCE`` (null and infinity alike)."""
    if set(stored) != set(recomputed):
        return True
    for kind, want in recomputed.items():
        have = stored[kind] or {}
        if (have.get("entries"), have.get("count")) != (want["entries"], want["count"]):
            return True
        a, b = have.get("rho"), want["rho"]
        a = a if a is not None and math.isfinite(a) else None
        b = b if b is not None and math.isfinite(b) else None
        if (a is None) != (b is None):
            return True
        if a is not None and b is not None and not math.isclose(a, b, rel_tol=COUNTS_RHO_TOLERANCE):
            return True
    return False


def _last_entry_at(s: Any, dataset_id: str) -> datetime | None:
    """The creation time of the dataset's last ledger entry (None when the ledger is empty)."""
    q = select(_L.created_at).where(_L.dataset_id == dataset_id).order_by(_L.seq.desc()).limit(1)
    when = s.scalar(q)
    return None if when is None else admission.aware(when)


def verify(
    db: Database,
    caller: Caller = SYSTEM,
    rebuild: bool = False,
    progress: Progress | None = None,
) -> r.VerifyReport:
    """Recompute totals from the ledger for every dataset the caller can see; report drift;
    optionally rebuild. ``progress(done, total)`` is called as ledger rows are read (a CLI
    draws its bar from it; see ``Progress``).

    Each dataset is read and (on request) rewritten in ONE write transaction that holds its
    lock, the lock every charge, reservation and budget change takes first: the sum is of the
    ledger as it stands, and no charge can slip in between reading it and writing the totals.

    A rebuild re-derives stored curves from their mechanisms, unless a release with newer
    formulas stamped the database (``FORMULAS_SETTING``): an older release's CLI then reports
    the entries its formulas disagree with and keeps the newer release's curves.
    """
    with db.read() as s:
        principal = authenticated(db, caller, s)
        q = select(Dataset.id).order_by(Dataset.name)
        if principal.dataset_ids is not None:
            q = q.where(Dataset.id.in_(principal.dataset_ids))
        ids = list(s.scalars(q))
        entries = select(func.count()).select_from(LedgerEntry)
        if principal.dataset_ids is not None:
            entries = entries.where(_L.dataset_id.in_(principal.dataset_ids))
        # a pld dataset's entries count once more: its distribution is recomposed from them
        pld_entries = entries.join(Dataset, Dataset.id == _L.dataset_id).where(
            Dataset.accounting == "pld"
        )
        work = 2 * int(s.scalar(entries) or 0) + int(s.scalar(pld_entries) or 0)
        # a newer release derived the stored curves: this one reports where its formulas
        # differ but does not put its older curves back (they may be below what is owed)
        keep_curves = _is_newer(_current_stamp(s))
    done = 0

    def tick(n: int) -> None:
        nonlocal done
        done += n
        if progress is not None:
            progress(done, max(work, done))

    if progress is not None:
        progress(0, work)
    report = []
    for dataset_id in ids:
        mismatched, checked = _curve_mismatches(db.read, dataset_id, tick)
        composed = _ledger_pld_unlocked(db, dataset_id, principal, tick)
        with db.write() as s, admission.locked(s, dataset_id, principal) as st:
            # the entries charged since the check (a hold's entry carries the hold's curve)
            mismatched += _curve_mismatches(lambda: nullcontext(s), st.id, tick, checked)[0]
            active = _active_holds(s, st.id)
            holds = _held_mismatches(active)
            rederive = rebuild and bool(mismatched or holds) and not keep_curves
            if rederive:
                _rederive(s, [entry_id for entry_id, _ in mismatched], holds)
            total, n, counts, held, next_expiry = _recomputed(s, st, active, tick)
            stored = st.committed
            drift = {
                "rho": stored.rho != total.rho,
                "rdp": not np.array_equal(stored.rdp, total.rdp),
                "pure_eps": stored.pure_eps != total.pure_eps,
                "gaussian_only": stored.gaussian_only != total.gaussian_only,
                # the entries' own deltas: admission converts at the budget delta less this sum
                "delta": stored.delta != total.delta,
                "entry_count": st.entry_count != n,
                "held": _held_drift(st.held, held),
                # the column /metrics reads beside the held sum, as read (before settling)
                "held_count": st.held_count_drift,
                # expiry fails closed only through it: settling starts when it is due
                "held_next_expiry": _expiry_drift(st.held_next_expiry, next_expiry),
            }
            pld_after = st.pld
            if st.is_pld:
                assert st.pld is not None
                pld, pld_held = _ledger_pld(s, st, composed, tick), _held_pld(s, st)
                drift["pld"] = _pld_drift(st, pld)
                drift["pld_held"] = _pld_held_drift(st, pld_held)
                if drift["pld"]:
                    pld_after = pld or Pld.identity(st.pld.interval, st.pld.extended)
            # what /budget, the dashboard and the metrics report (admission converts afresh)
            spent = _spend_of(st, total, pld_after)
            drift["spent"] = _spend_drift(st.spent, spent)
            drift["mechanism_counts"] = _counts_drift(st.mechanism_counts, counts)
            last_entry_at = _last_entry_at(s, st.id)
            drift["last_entry_at"] = last_entry_at != (
                None if st.last_entry_at is None else admission.aware(st.last_entry_at)
            )
            structures = _verify_structures(s, st, rebuild)  # allocations and blocks
            drift.update(dict.fromkeys(structures, True))
            drifted = [k for k, v in drift.items() if v]
            stale = _mismatch_summary(mismatched, [h.id for h in holds])
            item: dict[str, Any] = {
                "dataset_id": st.id,
                "name": st.name,
                "entries": n,
                "ok": not drifted and not mismatched and not holds,
                "drift": drifted,
                # the first LISTED_MISMATCHES of each, with their count (and the entries' seqs)
                "entries_with_curve_mismatch": stale["entries"],
                "entries_with_curve_mismatch_count": stale["entries_count"],
                "entries_with_curve_mismatch_truncated": stale["entries_truncated"],
                "entries_with_curve_mismatch_seq_range": stale["entries_seq_range"],
                "holds_with_curve_mismatch": stale["holds"],
                "holds_with_curve_mismatch_count": stale["holds_count"],
                "holds_with_curve_mismatch_truncated": stale["holds_truncated"],
            }
            if drifted or rederive:
                item["stored"] = {"rho": stored.rho, "entries": st.entry_count}
                item["recomputed"] = {"rho": total.rho, "entries": n}
            if rebuild and (drifted or rederive):
                st.committed, st.entry_count, st.mechanism_counts = total, n, counts
                st.spent, st.last_entry_at = spent, last_entry_at
                st.held, st.held_next_expiry = held, next_expiry
                if st.is_pld:
                    # a distribution that matches the ledger is kept: the regrouped
                    # recomposition is pessimistic too, but can certify a lower epsilon than
                    # the one the charges composed (rebuilding curves never needs it)
                    if drift["pld"]:
                        st.pld, st.pld_dirty = pld_after, True
                    if drift["pld_held"]:
                        st.pld_held, st.pld_dirty = pld_held, True
                st.dirty = True
                audit.record(
                    s,
                    principal,
                    "totals.rebuilt",
                    dataset_id=st.id,
                    details={
                        "drift": drifted,
                        "recomputed": item["recomputed"],
                        "stored": item["stored"],
                        # a newer release's curves are kept (keep_curves): none re-derived
                        "curves_rederived": stale if rederive else _mismatch_summary([], []),
                    },
                )
                item["rebuilt"] = True
            report.append(r.VerifiedDataset(**item))
    return r.VerifyReport(ok=all(x.ok for x in report), datasets=report)


FORMULAS_SETTING = "curve_formulas_version"
"""``app_setting`` key: the ``CURVE_FORMULAS_VERSION`` the stored curves were last re-derived
under."""


def _stores_curves(s: Session) -> bool:
    """Whether the database holds a curve some release derived: a ledger entry or an active
    hold (both store their mechanism's curve)."""
    if s.execute(select(_L.id).limit(1)).first() is not None:
        return True
    active = select(_R.id).where(_R.status == ReservationStatus.ACTIVE).limit(1)
    return s.execute(active).first() is not None


def _current_stamp(s: Session) -> str | None:
    row = s.get(AppSetting, FORMULAS_SETTING)
    return row.value if row is not None else None


def _is_current(stamp: str | None) -> bool:
    return stamp is not None and stamp.isdigit() and int(stamp) >= CURVE_FORMULAS_VERSION


def _is_newer(stamp: str | None) -> bool:
    """Whether the stored curves were stamped by a release with newer formulas than this one."""
    return stamp is not None and stamp.isdigit() and int(stamp) > CURVE_FORMULAS_VERSION


def formulas_behind(db: Database) -> str | None:
    """Why the stored curves may not be this release's, or None: the database stores curves
    (``_stores_curves``) and its ``FORMULAS_SETTING`` stamp is older than
    ``CURVE_FORMULAS_VERSION``, or absent (a database written by a release before the stamp,
    then migrated by plain ``alembic``; a database that stored nothing is stamped at start-up,
    ``stamp_if_empty``). ``/readyz`` reports it where start-up does not re-derive
    (auto-migration off): until ``migrate`` has run, totals written under since-corrected
    formulas may be below what the ledger's mechanisms imply."""
    with db.read() as s:
        return _behind(s)


def _behind(s: Session) -> str | None:
    """``formulas_behind`` in session ``s``."""
    stamp = _current_stamp(s)
    if _is_current(stamp) or not _stores_curves(s):
        return None
    return (
        f"the ledger's curves were derived under curve formulas version {stamp or 'unknown'}, "
        f"this release uses version {CURVE_FORMULAS_VERSION}: run `privacy-ledger migrate` "
        "(it re-derives them and rebuilds the totals)"
    )


_FOUND_CURRENT: weakref.WeakSet[Database] = weakref.WeakSet()
"""The databases this process found current (``check_formulas_current``): a stamp only rises
(releases from this one on never lower it), so the check reads it no more once it passed."""


def check_formulas_current(s: Session, db: Database) -> None:
    """503 (nothing recorded) for a charge or hold while the stored curves predate this
    release's formulas (``formulas_behind``: auto-migration off and ``migrate`` not run yet).
    ``/readyz`` said so, but the API still admitted charges on totals below what the ledger's
    mechanisms imply: one calibrated to fill a budget of 10 left 10.1 in the ledger once
    ``migrate`` re-derived the curves. Commits and releases of holds are not refused (their
    budget is held already), nor reads. Called under the dataset's lock, before any write."""
    if db in _FOUND_CURRENT:
        return
    if (why := _behind(s)) is not None:
        raise DatabaseUnavailable(
            f"no charge or hold is admitted until the curves are re-derived: {why}"
        )
    _FOUND_CURRENT.add(db)


def stamp_if_empty(db: Database) -> None:
    """Stamp ``CURVE_FORMULAS_VERSION`` on a database that stores no curve yet and has no stamp
    (a start-up without auto-migration on a database migrated by plain ``alembic``): there is
    nothing to re-derive, and every curve it will store is this release's. Without it, such a
    server became unready (``formulas_behind``) at its own first charge. Two replicas starting
    at once: the second insert fails and changes nothing."""
    with db.read() as s:
        if _current_stamp(s) is not None or _stores_curves(s):
            return
    try:
        with db.write() as s:
            if _current_stamp(s) is None and not _stores_curves(s):
                s.add(AppSetting(key=FORMULAS_SETTING, value=str(CURVE_FORMULAS_VERSION)))
    except IntegrityError:  # a replica starting at the same time stamped it first
        pass


def rederive_if_formulas_changed(db: Database) -> r.VerifyReport | None:
    """Once per ``CURVE_FORMULAS_VERSION``: ``verify --rebuild`` over every dataset (stored
    curves that no longer match their mechanism are re-derived, totals rebuilt; audited), then
    the version is stamped. None when the stamp is current, or newer: a replica of an older
    release restarting during a rolling upgrade must not put its older curves back (it did, and
    stamped its own version, undoing an upward correction). Called after ``migrate`` and by an
    auto-migrating start-up: without it, a ledger written before a formula correction kept
    reporting spends below what its mechanisms imply until an operator ran ``verify --rebuild``."""
    version = str(CURVE_FORMULAS_VERSION)
    with db.read() as s:
        if _is_current(_current_stamp(s)):  # a newer release's stamp: its curves stand
            return None
    report = verify(db, SYSTEM, rebuild=True)
    try:
        with db.write() as s:
            row = s.get(AppSetting, FORMULAS_SETTING)
            if row is None:
                s.add(AppSetting(key=FORMULAS_SETTING, value=version))
            elif not _is_current(row.value):  # never lowered (a newer release stamped since)
                row.value = version
    except IntegrityError:  # a replica starting at the same time stamped it first
        pass
    return report


__all__ = [
    "FORMULAS_SETTING",
    "LISTED_MISMATCHES",
    "Progress",
    "check_formulas_current",
    "formulas_behind",
    "rederive_if_formulas_changed",
    "stamp_if_empty",
    "verify",
]
