"""Reading the ledger: its entries (cursor pagination, filters), their export (CSV, JSON
Lines), and the rejections. Verifying and rebuilding totals is ``app.services.verification``.

The ledger is the source of truth: the totals are kept from it and can be rebuilt from it.
"""

from __future__ import annotations

import base64
import binascii
import csv
import io
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Select, or_, select
from sqlalchemy.exc import DBAPIError

from app import responses as r
from app.accounting.kinds import KINDS
from app.db.engine import Database
from app.db.models import (
    MAX_BIGINT,
    Allocation,
    ApiKey,
    LedgerEntry,
    Rejection,
    Reservation,
)
from app.errors import Unprocessable
from app.principal import Caller
from app.services import answers, blocks, state
from app.services.auth import authenticated
from app.services.state import DatasetState
from app.services.tallies import (
    ALLOCATION_ID_PREFIX,
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
_A = Allocation.__table__.c


@dataclass(frozen=True)
class EntryFilter:
    """Ledger filters: mechanism kind, label, key (id or label), creation time range, the
    allocation charged (an id when it starts with ``al_``, else a name: one allocation, where
    matching either had mixed an allocation named like another's id with that one), a block
    the entry's range covers (partitioned datasets)."""

    kind: str | None = None
    label: str | None = None
    key: str | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None
    allocation: str | None = None
    block: str | None = None

    def where(self, dataset_id: str) -> list[ColumnElement[bool]]:
        clauses: list[ColumnElement[bool]] = [_L.dataset_id == dataset_id]
        if self.allocation is not None:  # an id (al_...) or a name, never both
            if self.allocation.startswith(ALLOCATION_ID_PREFIX):
                clauses.append(_L.allocation_id == self.allocation)
            else:
                by_name = (
                    select(_A.id)
                    .where(_A.dataset_id == dataset_id, _A.name == self.allocation)
                    .scalar_subquery()
                )
                clauses.append(_L.allocation_id == by_name)
        if self.block is not None:  # keys of one unit sort as their blocks do
            clauses.append(_L.block_from <= self.block)
            clauses.append(_L.block_to >= self.block)
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
    """Entries with their key's label (``key_name``) and their allocation's name
    (``allocation_name``)."""
    return (
        select(*_ENTRY_COLUMNS, _K.label.label("key_name"), _A.name.label("allocation_name"))
        .select_from(
            LedgerEntry.__table__.outerjoin(ApiKey.__table__, _K.id == _L.key_id).outerjoin(
                Allocation.__table__, _A.id == _L.allocation_id
            )
        )
        .where(*where)
    )


def _checked(st: DatasetState, filters: EntryFilter) -> EntryFilter:
    """``filters``, or 422 for a block filter on a dataset that is not partitioned or a key
    that is not one of its unit's, and for a kind no mechanism has (a typo read as an empty
    ledger, with nothing to say it matched nothing)."""
    if filters.kind is not None and filters.kind not in KINDS:
        raise Unprocessable(
            f"no mechanism kind {filters.kind!r}; the kinds are: {', '.join(sorted(KINDS))}"
        )
    if filters.block is not None:
        if st.partition_unit is None:
            raise Unprocessable(f"dataset {st.name!r} is not partitioned: 'block' does not apply")
        blocks.check_key(st.partition_unit, filters.block)
    return filters


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
        q = _entries(_checked(st, filters or EntryFilter()).where(st.id))
        if before is not None:  # continue below the seq of the entry the cursor names
            at = s.scalar(select(_L.seq).where(_L.id == before, _L.dataset_id == st.id))
            q = q.where(_L.seq < at) if at is not None else q.where(_L.id < before)
        # newest first by ledger position, through the (dataset_id, seq) index: ordered by id,
        # both databases read and sorted every entry of the dataset for each page
        rows = s.execute(q.order_by(_L.seq.desc()).limit(limit + 1)).all()
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
    "allocation_id",
    "block_from",
    "block_to",
    "allocation_name",
)


def export_page(db: Database, dataset_id: str, filters: EntryFilter, after_seq: int) -> list[Any]:
    """Up to ``EXPORT_PAGE_SIZE`` entries after ``after_seq``, oldest first (one short read).

    Read again, once, on a fresh connection when the pooled one was found dead (the database
    restarted, or the backend was terminated): the export's status line is already sent, so
    the 503 other reads answer is no longer possible and the failure would cut the stream."""
    q = _entries([*filters.where(dataset_id), _L.seq > after_seq])
    q = q.order_by(_L.seq).limit(EXPORT_PAGE_SIZE)
    try:
        with db.read() as s:
            return list(s.execute(q).all())
    except DBAPIError as exc:
        if not exc.connection_invalidated:
            raise
    with db.read() as s:  # the pool replaced the dead connection (SQLAlchemy invalidated it)
        return list(s.execute(q).all())


CSV_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
"""A text cell that begins with one of these is a formula to a spreadsheet program (OWASP, CSV
injection; CWE-1236)."""


def _csv_text(text: str) -> str:
    """``text`` as a CSV cell that a spreadsheet shows as text: a leading single quote when it
    would start a formula (a label ``=HYPERLINK(...)`` a pipeline key wrote)."""
    return "'" + text if text.startswith(CSV_FORMULA_STARTS) else text


def _csv_cell(value: Any) -> str:
    """One CSV cell: numbers as written (``repr`` of a float, so ``-0.5`` stays a number), a
    time as ISO 8601, text and JSON neutralised by ``_csv_text``."""
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, datetime):
        return value.isoformat().replace("+00:00", "Z")
    if isinstance(value, dict | list):
        return _csv_text(json.dumps(value, separators=(",", ":"), sort_keys=True))
    return _csv_text(str(value))


class _CsvRows:
    """Rows ended by ``\\n``. Python's writer quotes a cell holding its line terminator but
    not a bare ``\\r``, which spreadsheet programs and CSV readers take for the end of a row:
    a label ``x\\r=1+1`` would end its row and start the next with a formula cell. A row with
    a ``\\r`` in any cell is therefore written with every cell quoted."""

    def __init__(self, out: io.StringIO) -> None:
        self._plain = csv.writer(out, lineterminator="\n")
        self._quoted = csv.writer(out, lineterminator="\n", quoting=csv.QUOTE_ALL)

    def write(self, cells: list[str]) -> None:
        writer = self._quoted if any("\r" in c for c in cells) else self._plain
        writer.writerow(cells)


def _csv_line(cells: list[str]) -> str:
    out = io.StringIO()
    _CsvRows(out).write(cells)
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
        st = state.load(s, ref, principal)
    dataset_id = st.id
    chosen = _checked(st, filters or EntryFilter())

    def lines() -> Iterator[str]:
        if fmt == "csv":
            yield _csv_line(list(CSV_COLUMNS))
        after = 0
        while True:
            rows = export_page(db, dataset_id, chosen, after)
            chunk = io.StringIO()  # one chunk per page: O(page) memory, few writes
            writer = _CsvRows(chunk)
            for row in rows:
                e = answers.entry(row._mapping)
                if fmt == "csv":
                    values = e.model_dump()
                    values["created_at"] = e.created_at
                    span = e.blocks
                    values["block_from"] = span.from_ if span is not None else None
                    values["block_to"] = span.to if span is not None else None
                    writer.write([_csv_cell(values[c]) for c in CSV_COLUMNS])
                else:
                    chunk.write(e.model_dump_json() + "\n")
            if rows:
                yield chunk.getvalue()
            if len(rows) < EXPORT_PAGE_SIZE:
                return
            after = rows[-1].seq

    return lines()


def rejection_answer(row: Rejection, key_name: str | None = None) -> r.Rejection:
    return r.Rejection(
        id=row.id,
        dataset_id=row.dataset_id,
        created_at=row.created_at,
        operation=row.operation,
        mechanism=row.mechanism,
        label=row.label,
        metadata=row.metadata_,
        key_id=row.key_id,
        key_name=key_name,
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
    kind: str | None = None,
) -> r.RejectionPage:
    """Refused charges and reservations, newest first (``kind``: of that mechanism kind; a
    refused request keeps its mechanism as sent, whose ``mechanism`` member is the kind)."""
    before = decode_cursor(cursor) if cursor else None
    with db.read() as s:
        principal = authenticated(db, caller, s)
        q = select(Rejection)
        order: list[Any] = [Rejection.id.desc()]
        if dataset is not None:
            # one dataset, paged through its (dataset_id, id) index. By id alone PostgreSQL
            # preferred the primary key (a dataset id's order says nothing of row order), read
            # backwards past every newer rejection of the other datasets (3,050 rows for a
            # 50-row page). Ordered by (dataset_id, id) only that index gives the order as it is
            # read; the filter is a range of one value since PostgreSQL drops an order column
            # that an equality fixes.
            one = state.load(s, dataset, principal).id
            q = q.where(Rejection.dataset_id.between(one, one))
            order.insert(0, Rejection.dataset_id.desc())
        elif principal.dataset_ids is not None:
            q = q.where(Rejection.dataset_id.in_(principal.dataset_ids))
        if since is not None:
            q = q.where(Rejection.created_at >= since)
        if until is not None:
            q = q.where(Rejection.created_at <= until)
        if label is not None:
            q = q.where(Rejection.label == label)
        if kind is not None:
            q = q.where(Rejection.mechanism["mechanism"].as_string() == kind)
        if before is not None:
            q = q.where(Rejection.id < before)
        rows = s.scalars(q.order_by(*order).limit(limit + 1)).all()
        more = len(rows) > limit
        rows = rows[:limit]
        names = answers.key_labels(s, (x.key_id for x in rows))
        return r.RejectionPage(
            rejections=[rejection_answer(x, names.get(x.key_id or "")) for x in rows],
            next_cursor=encode_cursor(rows[-1].id) if more and rows else None,
        )


__all__ = [
    "CSV_COLUMNS",
    "EXPORT_FORMATS",
    "EXPORT_PAGE_SIZE",
    "EntryFilter",
    "decode_cursor",
    "encode_cursor",
    "export_entries",
    "export_page",
    "list_entries",
    "list_rejections",
    "rejection_answer",
]
