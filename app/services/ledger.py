"""Reading the ledger (cursor pagination), rejections, and verifying / rebuilding totals.

The ledger is the source of truth. ``verify`` recomputes a dataset's totals from its entries
(summing the stored entry curves in ledger order with the same round-up additions the charge
path used, so a consistent database matches bit for bit), re-derives each entry's curve from its
stored mechanism to catch drift in the formulas or the order grid, and checks the held sum
against the active reservations. It reads and rewrites each dataset under that dataset's lock,
so charges racing a rebuild are neither lost nor double counted.
"""

from __future__ import annotations

import base64
import binascii
import csv
import io
import json
import math
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
from sqlalchemy import ColumnElement, Select, or_, select

from app import responses as r
from app.accounting.curve import PrivacyCurve
from app.accounting.mechanisms import mechanism_from_dict
from app.accounting.pld import Pld
from app.accounting.pld_filter import PldFilter
from app.accounting.running import RunningSum
from app.db.codec import curve_of
from app.db.engine import Database
from app.db.models import (
    MAX_BIGINT,
    Allocation,
    AllocationBlock,
    ApiKey,
    Dataset,
    DatasetBlock,
    LedgerEntry,
    Rejection,
    Reservation,
    ReservationStatus,
)
from app.errors import Unprocessable
from app.principal import SYSTEM, Caller
from app.services import admission, answers, audit, blocks, state
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
_ENTRY_COLUMNS = (
    _L.id,
    _L.dataset_id,
    _L.seq,
    _L.created_at,
    _L.mechanism,
    _L.kind,
    _L.count,
    _L.label,
    _L.metadata,
    _L.rho,
    _L.pure_eps,
    _L.spent_epsilon,
    _L.source,
    _L.key_id,
    _L.reservation_id,
    _L.allocation_id,
    _L.block_from,
    _L.block_to,
)
_R = Reservation.__table__.c


def encode_cursor(last_id: int) -> str:
    return base64.urlsafe_b64encode(f"v1:{last_id}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> int:
    """The row id a cursor continues before; 422 for anything not made by ``encode_cursor``
    (including positions outside 1..MAX_BIGINT, which no database could compare with)."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        version, value = raw.split(":", 1)
        if version != "v1" or not value.isascii() or not value.isdigit():
            raise ValueError(version)
        position = int(value)
        if not 1 <= position <= MAX_BIGINT:
            raise ValueError(value)
        return position
    except (ValueError, UnicodeDecodeError, binascii.Error):
        raise Unprocessable(f"invalid cursor {cursor!r}") from None


_K = ApiKey.__table__.c


@dataclass(frozen=True)
class EntryFilter:
    """Ledger filters: mechanism kind, label, key (id or label), creation time range."""

    kind: str | None = None
    label: str | None = None
    key: str | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None

    def where(self, dataset_id: str) -> list[ColumnElement[bool]]:
        clauses: list[ColumnElement[bool]] = [_L.dataset_id == dataset_id]
        if self.kind is not None:
            clauses.append(_L.kind == self.kind)
        if self.label is not None:
            clauses.append(_L.label == self.label)
        if self.key is not None:
            by_label = select(_K.id).where(_K.label == self.key).scalar_subquery()
            clauses.append(or_(_L.key_id == self.key, _L.key_id.in_(by_label)))
        if self.created_after is not None:
            clauses.append(_L.created_at >= self.created_after)
        if self.created_before is not None:
            clauses.append(_L.created_at <= self.created_before)
        return clauses


def _entries(where: list[ColumnElement[bool]]) -> Select[Any]:
    """Entries with their key's label (``key_name``)."""
    return (
        select(*_ENTRY_COLUMNS, _K.label.label("key_name"))
        .select_from(LedgerEntry.__table__.outerjoin(ApiKey.__table__, _K.id == _L.key_id))
        .where(*where)
    )


def list_entries(
    db: Database,
    caller: Caller,
    ref: str,
    *,
    limit: int,
    cursor: str | None = None,
    filters: EntryFilter | None = None,
) -> r.LedgerPage:
    """Entries newest first (``filters``: only those); ``next_cursor`` continues after the last
    one returned. ``total`` is the ledger's length."""
    before = decode_cursor(cursor) if cursor else None
    with db.read() as s:
        principal = authenticated(db, caller, s)
        st = state.load(s, ref, principal)
        q = _entries((filters or EntryFilter()).where(st.id))
        if before is not None:
            q = q.where(_L.id < before)
        rows = s.execute(q.order_by(_L.id.desc()).limit(limit + 1)).all()
        more = len(rows) > limit
        rows = rows[:limit]
        return r.LedgerPage(
            dataset_id=st.id,
            entries=[answers.entry(row._mapping) for row in rows],
            next_cursor=encode_cursor(rows[-1].id) if more and rows else None,
            total=st.entry_count,
        )


EXPORT_PAGE_SIZE = 1000
"""Rows per read when streaming the ledger (each page is a fresh, short read transaction)."""
EXPORT_FORMATS = ("csv", "jsonl")
CSV_COLUMNS = (
    "id",
    "seq",
    "created_at",
    "kind",
    "count",
    "label",
    "key_id",
    "key_name",
    "source",
    "reservation_id",
    "rho",
    "pure_epsilon",
    "spent_epsilon",
    "mechanism",
    "metadata",
)


def export_page(db: Database, dataset_id: str, filters: EntryFilter, after_seq: int) -> list[Any]:
    """Up to ``EXPORT_PAGE_SIZE`` entries after ``after_seq``, oldest first (one short read)."""
    with db.read() as s:
        q = _entries([*filters.where(dataset_id), _L.seq > after_seq])
        return list(s.execute(q.order_by(_L.seq).limit(EXPORT_PAGE_SIZE)).all())


def _csv_cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"), sort_keys=True)
    if isinstance(value, datetime):
        return value.isoformat().replace("+00:00", "Z")
    return str(value)


def _csv_line(cells: list[str]) -> str:
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerow(cells)
    return out.getvalue()


def export_entries(
    db: Database, caller: Caller, ref: str, fmt: str, filters: EntryFilter | None = None
) -> Iterator[str]:
    """The ledger (``filters``: only those entries), oldest first, as CSV (a header row, floats
    as ``repr``) or JSON Lines (one entry answer per line). Checks access now, then streams in
    pages of ``EXPORT_PAGE_SIZE`` rows read by sequence number: O(1) memory in the ledger."""
    if fmt not in EXPORT_FORMATS:
        raise Unprocessable(f"format must be one of {list(EXPORT_FORMATS)}, got {fmt!r}")
    with db.read() as s:
        principal = authenticated(db, caller, s)
        dataset_id = state.load(s, ref, principal).id
    chosen = filters or EntryFilter()

    def lines() -> Iterator[str]:
        if fmt == "csv":
            yield _csv_line(list(CSV_COLUMNS))
        after = 0
        while True:
            rows = export_page(db, dataset_id, chosen, after)
            chunk = io.StringIO()  # one chunk per page: O(page) memory, few writes
            writer = csv.writer(chunk, lineterminator="\n")
            for row in rows:
                e = answers.entry(row._mapping)
                if fmt == "csv":
                    values = e.model_dump()
                    values["created_at"] = e.created_at
                    writer.writerow([_csv_cell(values[c]) for c in CSV_COLUMNS])
                else:
                    chunk.write(e.model_dump_json() + "\n")
            if rows:
                yield chunk.getvalue()
            if len(rows) < EXPORT_PAGE_SIZE:
                return
            after = rows[-1].seq

    return lines()


def rejection_answer(row: Rejection) -> r.Rejection:
    return r.Rejection(
        id=row.id,
        dataset_id=row.dataset_id,
        created_at=row.created_at,
        operation=row.operation,
        mechanism=row.mechanism,
        label=row.label,
        metadata=row.metadata_,
        key_id=row.key_id,
        reason=row.reason,
        spent=row.spent,
        requested=row.requested,
        budget=row.budget,
    )


def list_rejections(
    db: Database,
    caller: Caller,
    *,
    dataset: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    limit: int = 100,
    cursor: str | None = None,
    label: str | None = None,
) -> r.RejectionPage:
    """Refused charges and reservations, newest first."""
    before = decode_cursor(cursor) if cursor else None
    with db.read() as s:
        principal = authenticated(db, caller, s)
        q = select(Rejection)
        if dataset is not None:
            q = q.where(Rejection.dataset_id == state.load(s, dataset, principal).id)
        elif principal.dataset_ids is not None:
            q = q.where(Rejection.dataset_id.in_(principal.dataset_ids))
        if since is not None:
            q = q.where(Rejection.created_at >= since)
        if until is not None:
            q = q.where(Rejection.created_at <= until)
        if label is not None:
            q = q.where(Rejection.label == label)
        if before is not None:
            q = q.where(Rejection.id < before)
        rows = s.scalars(q.order_by(Rejection.id.desc()).limit(limit + 1)).all()
        more = len(rows) > limit
        rows = rows[:limit]
        return r.RejectionPage(
            rejections=[rejection_answer(x) for x in rows],
            next_cursor=encode_cursor(rows[-1].id) if more and rows else None,
        )


def _curve_mismatches(db: Database, dataset_id: str) -> list[int]:
    """Ids of entries whose stored curve no longer matches the curve of their mechanism (drift
    in the formulas or the order grid). Entries never change, so this runs outside the lock."""
    mismatched: list[int] = []
    with db.read() as s:
        rows = s.execute(
            select(LedgerEntry).where(_L.dataset_id == dataset_id).order_by(_L.seq)
        ).scalars()
        for e in rows:
            stored = curve_of(e)
            fresh = mechanism_from_dict(e.mechanism).curve()
            if not (
                math.isclose(fresh.rho, stored.rho, rel_tol=1e-12)
                and np.allclose(fresh.rdp, stored.rdp, rtol=1e-12, atol=0)
            ):
                mismatched.append(e.id)
    return mismatched


def _recomputed(s: Any, st: DatasetState) -> tuple[PrivacyCurve, int, dict[str, Any], RunningSum]:
    """From the ledger, read in the caller's transaction (which holds the dataset's lock, so the
    ledger cannot move): the sum of stored entry curves in ledger order, the entry count and
    per-kind counts; and the held sum of the active reservations."""
    total = PrivacyCurve.zero()
    n = 0
    counts: dict[str, Any] = {}
    rows = s.execute(select(LedgerEntry).where(_L.dataset_id == st.id).order_by(_L.seq)).scalars()
    for e in rows:
        total = total + curve_of(e)
        n += 1
        c = counts.setdefault(e.kind, {"entries": 0, "count": 0, "rho": 0.0})
        c["entries"] += 1
        c["count"] += e.count
        c["rho"] = c["rho"] + e.rho if c["rho"] is not None and math.isfinite(e.rho) else None
    held = RunningSum()
    for h in s.scalars(
        select(Reservation)
        .where(_R.dataset_id == st.id, _R.status == ReservationStatus.ACTIVE)
        .order_by(_R.created_at, _R.id)
    ):
        held = held.add(curve_of(h))
    return total, n, counts, held


PLD_TOLERANCE = 1e-6
"""Relative difference in certified epsilon within which a stored PLD matches the ledger's:
the check recomposes identical entries together (``self_compose``), which rounds differently
from one composition per charge; both are pessimistic, so either may be kept."""


def _pld_of(s: Any, st: DatasetState, active_only: bool) -> Pld | None:
    """A ``pld`` dataset's PLD recomposed from its ledger (or its active holds), identical
    mechanisms grouped."""
    assert st.pld is not None
    q = (
        select(_R.mechanism).where(_R.dataset_id == st.id, _R.status == ReservationStatus.ACTIVE)
        if active_only
        else select(_L.mechanism).where(_L.dataset_id == st.id)
    )
    groups = Counter(json.dumps(m, sort_keys=True) for m in s.scalars(q))
    if not groups:
        return None
    total = Pld.identity(st.pld.interval, st.pld.extended)
    for mechanism, n in sorted(groups.items()):
        total = total.compose(admission.entry_pld(st, json.loads(mechanism)).self_compose(n))
    return total


def _pld_drift(st: DatasetState, fresh: Pld | None) -> bool:
    assert st.pld is not None
    if fresh is None:
        return st.entry_count != 0
    delta = st.budget.delta
    a, b = st.pld.epsilon(delta), fresh.epsilon(delta)
    return not math.isclose(a, b, rel_tol=PLD_TOLERANCE, abs_tol=1e-12)


def _held_drift(stored: RunningSum, fresh: RunningSum) -> bool:
    """Stored held sums are rounded up along their own add/remove history, so they match the
    fresh sum only to within rounding; they must never be below it."""
    a, b = stored.total(), fresh.total()
    if a is None or b is None:
        return (a is None) != (b is None)
    return bool(
        stored.count != fresh.count
        or a.rho < b.rho
        or (a.rdp < b.rdp).any()
        or not np.allclose(a.rdp, b.rdp, rtol=1e-9, atol=1e-300)
    )


# --- budget structures (issue 15) -------------------------------------------------------------


def _structure_sums(
    s: Any, st: DatasetState
) -> tuple[dict[tuple[str, str, str | None], tuple[PrivacyCurve, int]], dict[Any, RunningSum]]:
    """Each tally's composed curve and entry count recomputed from the ledger (stored entry
    curves in ledger order, as the charge path added them), and each tally's held sum from the
    active reservations. Keys: (kind, owner, block key)."""
    sums: dict[tuple[str, str, str | None], tuple[PrivacyCurve, int]] = {}
    held: dict[Any, RunningSum] = {}
    unit = st.partition_unit

    def targets(allocation_id: str | None, first: str | None, last: str | None) -> list[Any]:
        out: list[Any] = []
        if allocation_id is not None:
            out.append((ALLOCATION, allocation_id, None))
        if unit is not None and first is not None and last is not None:
            for k in blocks.block_range(unit, first, last):
                out.append((BLOCK, st.id, k))
                if allocation_id is not None:
                    out.append((ALLOCATION_BLOCK, allocation_id, k))
        return out

    q = (
        select(LedgerEntry)
        .where(
            _L.dataset_id == st.id, or_(_L.allocation_id.is_not(None), _L.block_from.is_not(None))
        )
        .order_by(_L.seq)
    )
    for e in s.execute(q).scalars():
        curve = curve_of(e)
        for t in targets(e.allocation_id, e.block_from, e.block_to):
            total, n = sums.get(t, (PrivacyCurve.zero(), 0))
            sums[t] = (total + curve, n + 1)
    for h in s.scalars(
        select(Reservation)
        .where(_R.dataset_id == st.id, _R.status == ReservationStatus.ACTIVE)
        .order_by(_R.created_at, _R.id)
    ):
        for t in targets(h.allocation_id, h.block_from, h.block_to):
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
    wanted = set(sums) | set(held) | {(t.kind, t.owner, t.key) for t in found}
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
        total, n = sums.get(ident, (PrivacyCurve.zero(), 0))
        fresh_held = held.get(ident, RunningSum())
        stored = t.committed
        if (
            stored.rho != total.rho
            or not np.array_equal(stored.rdp, total.rdp)
            or stored.pure_eps != total.pure_eps
            or stored.gaussian_only != total.gaussian_only
            or t.entry_count != n
            or _held_drift(t.held, fresh_held)
        ):
            name = names.get(t.owner, t.owner)
            drifted.append(
                f"{t.kind}:{name}" + (f"/{t.key}" if t.kind == ALLOCATION_BLOCK else "")
                if t.kind != BLOCK
                else f"block:{t.key}"
            )
            if rebuild:
                t.committed, t.entry_count, t.held = total, n, fresh_held
                t.spent = t.filter.spend(total)
                t.dirty = True
    return drifted


def verify(db: Database, caller: Caller = SYSTEM, rebuild: bool = False) -> r.VerifyReport:
    """Recompute totals from the ledger for every dataset the caller can see; report drift;
    optionally rebuild.

    Each dataset is read and (on request) rewritten in ONE write transaction that holds its
    lock, the lock every charge, reservation and budget change takes first: the sum is of the
    ledger as it stands, and no charge can slip in between reading it and writing the totals.
    """
    with db.read() as s:
        principal = authenticated(db, caller, s)
        q = select(Dataset.id).order_by(Dataset.name)
        if principal.dataset_ids is not None:
            q = q.where(Dataset.id.in_(principal.dataset_ids))
        ids = list(s.scalars(q))
    report = []
    for dataset_id in ids:
        mismatched = _curve_mismatches(db, dataset_id)
        with db.write() as s, admission.locked(s, dataset_id, principal) as st:
            total, n, counts, held = _recomputed(s, st)
            stored = st.committed
            drift = {
                "rho": stored.rho != total.rho,
                "rdp": not np.array_equal(stored.rdp, total.rdp),
                "pure_eps": stored.pure_eps != total.pure_eps,
                "gaussian_only": stored.gaussian_only != total.gaussian_only,
                "entry_count": st.entry_count != n,
                "held": _held_drift(st.held, held),
            }
            if st.is_pld:
                pld, pld_held = _pld_of(s, st, False), _pld_of(s, st, True)
                drift["pld"] = _pld_drift(st, pld)
            structures = _verify_structures(s, st, rebuild)  # allocations and blocks
            drift.update(dict.fromkeys(structures, True))
            drifted = [k for k, v in drift.items() if v]
            item: dict[str, Any] = {
                "dataset_id": st.id,
                "name": st.name,
                "entries": n,
                "ok": not drifted and not mismatched,
                "drift": drifted,
                "entries_with_curve_mismatch": mismatched,
            }
            if drifted:
                item["stored"] = {"rho": stored.rho, "entries": st.entry_count}
                item["recomputed"] = {"rho": total.rho, "entries": n}
            if rebuild and drifted:
                st.committed, st.entry_count, st.mechanism_counts = total, n, counts
                st.spent = admission.totals_filter_spend(st, total)
                st.held = held
                if st.is_pld:
                    assert st.pld is not None
                    st.pld = pld or Pld.identity(st.pld.interval, st.pld.extended)
                    st.pld_held, st.pld_dirty = pld_held, True
                    st.spent = PldFilter(st.budget).spend(st.pld)
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
                    },
                )
                item["rebuilt"] = True
            report.append(r.VerifiedDataset(**item))
    return r.VerifyReport(ok=all(x.ok for x in report), datasets=report)


__all__ = [
    "decode_cursor",
    "encode_cursor",
    "EXPORT_FORMATS",
    "EXPORT_PAGE_SIZE",
    "EntryFilter",
    "export_entries",
    "export_page",
    "list_entries",
    "list_rejections",
    "rejection_answer",
    "verify",
]
