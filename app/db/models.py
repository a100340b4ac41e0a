"""SQLAlchemy 2 typed models. Tables are singular snake_case; timestamps end in ``_at`` (UTC).

The ledger (``ledger_entry``) is the source of truth; ``dataset_total`` holds running sums
updated in the same transaction as every ledger insert, so budget reads and admission checks
cost O(1) in the ledger length. Curves are stored as little-endian float64 bytes over the
order grid whose version is recorded beside them.
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Enum,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from app.principal import Role

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# BIGINT autoincrement on PostgreSQL, INTEGER PRIMARY KEY (rowid) on SQLite
BigId = BigInteger().with_variant(Integer(), "sqlite")
MAX_BIGINT = 2**63 - 1
"""Largest id, cursor position or offset both databases can compare against (signed 64 bit)."""


class ReservationStatus(StrEnum):
    """A reservation's life: active, then exactly one of committed, released or expired."""

    ACTIVE = "active"
    COMMITTED = "committed"
    RELEASED = "released"
    EXPIRED = "expired"


class EntrySource(StrEnum):
    """How a ledger entry came to be."""

    CHARGE = "charge"
    RESERVATION = "reservation"  # a reservation committed
    RESERVATION_EXPIRED = "reservation_expired"  # an expired hold, charged (fail closed)


def _stored(enum: type[StrEnum], length: int) -> Enum:
    """A StrEnum stored as its value in a VARCHAR (no native enum type, no CHECK)."""
    return Enum(
        enum,
        native_enum=False,
        create_constraint=False,
        length=length,
        values_callable=lambda e: [m.value for m in e],
    )


def utcnow() -> datetime:
    """Current time, timezone-aware UTC."""
    return datetime.now(UTC)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {dict[str, Any]: JSON, list[Any]: JSON}


class ApiKey(Base):
    """An API key: shown once, stored only as its slow salted lookup digest
    (``app.services.key_digest``). ``salt`` and ``key_hash`` belong to rows written before that
    scheme, until their first use rewrites them."""

    __tablename__ = "api_key"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    lookup: Mapped[str] = mapped_column(String(64), unique=True)
    salt: Mapped[str | None] = mapped_column(String(64), nullable=True)
    key_hash: Mapped[str | None] = mapped_column(String(128), nullable=True)
    role: Mapped[Role] = mapped_column(_stored(Role, 16))
    dataset_ids: Mapped[list[Any] | None] = mapped_column(JSON, nullable=True)
    label: Mapped[str | None] = mapped_column(String(200), nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    # budget structures: the allocation names this key must charge to (None = any or none)
    allocations: Mapped[list[Any] | None] = mapped_column(JSON, nullable=True)
    created_by: Mapped[str | None] = mapped_column(String(32), nullable=True)
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    last_used_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class Dataset(Base):
    """A dataset with its budget and the admission filter fixed at creation."""

    __tablename__ = "dataset"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    description: Mapped[str | None] = mapped_column(Text, nullable=True)
    budget_epsilon: Mapped[float] = mapped_column(Float)
    budget_delta: Mapped[float] = mapped_column(Float)
    accounting: Mapped[str] = mapped_column(String(8))
    adaptive: Mapped[bool] = mapped_column(Boolean)
    allowed_mechanisms: Mapped[list[Any] | None] = mapped_column(JSON, nullable=True)
    filter: Mapped[str] = mapped_column(String(32))
    filter_bound: Mapped[float | None] = mapped_column(Float, nullable=True)
    # the stored parameters of filters that have them (rdp_fixed_orders: orders, thresholds)
    filter_params: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    # budget structures (issue 15): a time-partitioned dataset's block unit (day, week, month;
    # None = not partitioned) and its optional lifetime budget with that budget's filter
    partition_unit: Mapped[str | None] = mapped_column(String(8), nullable=True)
    lifetime_budget_epsilon: Mapped[float | None] = mapped_column(Float, nullable=True)
    lifetime_budget_delta: Mapped[float | None] = mapped_column(Float, nullable=True)
    lifetime_filter_bound: Mapped[float | None] = mapped_column(Float, nullable=True)
    lifetime_filter_params: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    # retired (refuses charges and reservations, hidden from the default listing) when set
    archived_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    # the fraction of the budget epsilon at which the dataset's state turns "warning"
    warning_threshold: Mapped[float] = mapped_column(Float, default=0.8, server_default="0.8")
    # adaptive filters: the part of the budget delta set aside at creation for entries with
    # their own delta (0: refused); the filter's rule is made for the budget delta less it
    entry_delta_budget: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    # the same for a partitioned dataset's lifetime budget, whose filter composes every block's
    # charges (0: it sets nothing aside)
    lifetime_entry_delta_budget: Mapped[float] = mapped_column(
        Float, default=0.0, server_default="0"
    )


class DatasetTotal(Base):
    """Running sums of a dataset's ledger (the row that is locked to serialise charges)."""

    __tablename__ = "dataset_total"

    dataset_id: Mapped[str] = mapped_column(
        String(32), ForeignKey("dataset.id", ondelete="CASCADE"), primary_key=True
    )
    orders_version: Mapped[int] = mapped_column(Integer)
    rho: Mapped[float] = mapped_column(Float)
    rdp: Mapped[bytes] = mapped_column(LargeBinary)
    pure_eps: Mapped[float] = mapped_column(Float)
    gaussian_only: Mapped[bool] = mapped_column(Boolean)
    delta: Mapped[float] = mapped_column(Float, default=0.0)  # entries' own deltas
    entry_count: Mapped[int] = mapped_column(BigInteger)
    mechanism_counts: Mapped[dict[str, Any]] = mapped_column(JSON)
    spent_epsilon: Mapped[float] = mapped_column(Float)
    spent_method: Mapped[str] = mapped_column(String(64))
    last_entry_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    # active reservations: their number, their curves' RunningSum (codec.held_to_bytes; None
    # when there are none) and the earliest expiry among them, so that admission reads no
    # reservation row unless one is due
    held_count: Mapped[int] = mapped_column(BigInteger, default=0)
    held: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)
    held_next_expiry: Mapped[datetime | None] = mapped_column(
        DateTime(timezone=True), nullable=True
    )


class DatasetPld(Base):
    """A ``pld`` dataset's composed privacy loss distribution (``app.accounting.pld``, bytes of
    ``Pld.to_bytes``, up to a few MiB), and that of its active holds; written in the same
    transaction as the ledger. Kept apart from ``dataset_total`` so budget reads never load it."""

    __tablename__ = "dataset_pld"

    dataset_id: Mapped[str] = mapped_column(
        String(32), ForeignKey("dataset.id", ondelete="CASCADE"), primary_key=True
    )
    state: Mapped[bytes] = mapped_column(LargeBinary)
    held: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class LedgerEntry(Base):
    """One recorded mechanism invocation, with the curve it added (append-only)."""

    __tablename__ = "ledger_entry"
    # (dataset_id, seq) also serves every lookup by dataset: no separate dataset_id index
    __table_args__ = (UniqueConstraint("dataset_id", "seq", name="uq_ledger_entry_dataset_seq"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    dataset_id: Mapped[str] = mapped_column(
        String(32), ForeignKey("dataset.id", ondelete="CASCADE")
    )
    seq: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    kind: Mapped[str] = mapped_column(String(32))
    mechanism: Mapped[dict[str, Any]] = mapped_column(JSON)
    count: Mapped[int] = mapped_column(BigInteger)
    rho: Mapped[float] = mapped_column(Float)
    rdp: Mapped[bytes] = mapped_column(LargeBinary)
    pure_eps: Mapped[float] = mapped_column(Float)
    gaussian_only: Mapped[bool] = mapped_column(Boolean)
    delta: Mapped[float] = mapped_column(Float, default=0.0)  # entries' own deltas
    orders_version: Mapped[int] = mapped_column(Integer)
    label: Mapped[str | None] = mapped_column(String(200), nullable=True)
    metadata_: Mapped[dict[str, Any] | None] = mapped_column("metadata", JSON, nullable=True)
    key_id: Mapped[str | None] = mapped_column(String(32), nullable=True)
    source: Mapped[EntrySource] = mapped_column(
        _stored(EntrySource, 32), default=EntrySource.CHARGE
    )
    reservation_id: Mapped[str | None] = mapped_column(String(32), nullable=True)
    spent_epsilon: Mapped[float] = mapped_column(Float)
    # budget structures: the allocation charged and the block range (inclusive keys)
    allocation_id: Mapped[str | None] = mapped_column(String(32), nullable=True)
    block_from: Mapped[str | None] = mapped_column(String(16), nullable=True)
    block_to: Mapped[str | None] = mapped_column(String(16), nullable=True)


class IdempotencyRecord(Base):
    """The first answer to a request carrying an ``Idempotency-Key``, per dataset and per API
    key (``app.services.idempotency``): the same header value sent by another API key is
    another request."""

    __tablename__ = "idempotency_record"
    __table_args__ = (
        UniqueConstraint(
            "dataset_id", "key", "key_id", name="uq_idempotency_record_dataset_key_key_id"
        ),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    dataset_id: Mapped[str] = mapped_column(
        String(32), ForeignKey("dataset.id", ondelete="CASCADE")
    )
    key: Mapped[str] = mapped_column(String(200))
    # the API key that made the request (``idempotency.SYSTEM_OWNER`` for the service itself);
    # None only on a record made before migration 0009 whose key could not be found
    key_id: Mapped[str | None] = mapped_column(String(32), nullable=True)
    scope: Mapped[str] = mapped_column(String(32), default="charge")
    request_hash: Mapped[str] = mapped_column(String(64))
    status_code: Mapped[int] = mapped_column(Integer)
    response: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Rejection(Base):
    """A refused charge or reservation, with the spend at that moment and the reason."""

    __tablename__ = "rejection"
    __table_args__ = (
        Index("ix_rejection_dataset_created", "dataset_id", "created_at"),
        # a dataset's rejections newest first by id (its pages and their cursor), read in order
        Index("ix_rejection_dataset_id_id", "dataset_id", "id"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    dataset_id: Mapped[str] = mapped_column(
        String(32), ForeignKey("dataset.id", ondelete="CASCADE")
    )
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    operation: Mapped[str] = mapped_column(String(16))
    mechanism: Mapped[dict[str, Any]] = mapped_column(JSON)
    label: Mapped[str | None] = mapped_column(String(200), nullable=True)
    metadata_: Mapped[dict[str, Any] | None] = mapped_column("metadata", JSON, nullable=True)
    key_id: Mapped[str | None] = mapped_column(String(32), nullable=True)
    reason: Mapped[str] = mapped_column(Text)
    spent: Mapped[dict[str, Any]] = mapped_column(JSON)
    requested: Mapped[dict[str, Any]] = mapped_column(JSON)
    budget: Mapped[dict[str, Any]] = mapped_column(JSON)


class Reservation(Base):
    """Budget held for a planned invocation: active -> committed | released | expired."""

    __tablename__ = "reservation"
    __table_args__ = (
        # a dataset's due holds (admission), and every due hold (the sweeper)
        Index("ix_reservation_dataset_status_expires", "dataset_id", "status", "expires_at"),
        Index("ix_reservation_status_expires", "status", "expires_at"),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    dataset_id: Mapped[str] = mapped_column(
        String(32), ForeignKey("dataset.id", ondelete="CASCADE")
    )
    status: Mapped[ReservationStatus] = mapped_column(_stored(ReservationStatus, 16))
    kind: Mapped[str] = mapped_column(String(32))
    mechanism: Mapped[dict[str, Any]] = mapped_column(JSON)
    count: Mapped[int] = mapped_column(BigInteger)
    rho: Mapped[float] = mapped_column(Float)
    rdp: Mapped[bytes] = mapped_column(LargeBinary)
    pure_eps: Mapped[float] = mapped_column(Float)
    gaussian_only: Mapped[bool] = mapped_column(Boolean)
    delta: Mapped[float] = mapped_column(Float, default=0.0)  # entries' own deltas
    orders_version: Mapped[int] = mapped_column(Integer)
    label: Mapped[str | None] = mapped_column(String(200), nullable=True)
    metadata_: Mapped[dict[str, Any] | None] = mapped_column("metadata", JSON, nullable=True)
    key_id: Mapped[str | None] = mapped_column(String(32), nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    resolved_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    resolved_by: Mapped[str | None] = mapped_column(String(32), nullable=True)
    ledger_entry_id: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    # budget structures: the allocation and block range the hold is held against
    allocation_id: Mapped[str | None] = mapped_column(String(32), nullable=True)
    block_from: Mapped[str | None] = mapped_column(String(16), nullable=True)
    block_to: Mapped[str | None] = mapped_column(String(16), nullable=True)


class AuditEvent(Base):
    """Append-only audit trail: who (key id) did what, when, with old and new values."""

    __tablename__ = "audit_event"
    # a dataset's events newest first by id (its pages and ``before_id``), read in order
    __table_args__ = (Index("ix_audit_event_dataset_id_id", "dataset_id", "id"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    created_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), default=utcnow, index=True
    )
    key_id: Mapped[str | None] = mapped_column(String(32), nullable=True)
    action: Mapped[str] = mapped_column(String(64))
    dataset_id: Mapped[str | None] = mapped_column(String(32), nullable=True)
    target_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    details: Mapped[dict[str, Any]] = mapped_column(JSON)


class AppSetting(Base):
    """Small key/value facts about the installation (e.g. that the first admin key was made)."""

    __tablename__ = "app_setting"

    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(Text)


# --- budget structures (issue 15): allocations and time blocks ---------------------------------


class _RunningTotals:
    """The running-totals columns of an allocation and of a time block (those of
    ``dataset_total`` too, which has a few more): the composed curve (``codec.curve_columns``),
    entry count, spend under the owner's filter, and the active holds' count and
    ``RunningSum`` (``codec.held_to_bytes``; None when there are none)."""

    orders_version: Mapped[int] = mapped_column(Integer)
    rho: Mapped[float] = mapped_column(Float)
    rdp: Mapped[bytes] = mapped_column(LargeBinary)
    pure_eps: Mapped[float] = mapped_column(Float)
    gaussian_only: Mapped[bool] = mapped_column(Boolean)
    delta: Mapped[float] = mapped_column(Float, default=0.0)
    entry_count: Mapped[int] = mapped_column(BigInteger)
    spent_epsilon: Mapped[float] = mapped_column(Float)
    spent_method: Mapped[str] = mapped_column(String(64))
    held_count: Mapped[int] = mapped_column(BigInteger, default=0)
    held: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)


class Allocation(_RunningTotals, Base):
    """A sub-budget of a dataset (a team's or analyst's), with the running totals of the
    charges made to it (same columns and codec as ``dataset_total``). Its filter has the
    dataset's kind (and, for ``rdp_fixed_orders``, orders chosen for its own budget when it
    was created: ``tallies.allocation_filter``)."""

    __tablename__ = "allocation"
    __table_args__ = (UniqueConstraint("dataset_id", "name", name="uq_allocation_dataset_name"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    dataset_id: Mapped[str] = mapped_column(
        String(32), ForeignKey("dataset.id", ondelete="CASCADE")
    )
    name: Mapped[str] = mapped_column(String(200))
    budget_epsilon: Mapped[float] = mapped_column(Float)
    budget_delta: Mapped[float] = mapped_column(Float)
    filter_bound: Mapped[float | None] = mapped_column(Float, nullable=True)
    filter_params: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    # the part of its delta set aside for entries with their own delta (as a dataset's)
    entry_delta_budget: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class DatasetBlock(_RunningTotals, Base):
    """Running totals of one time block of a partitioned dataset (``key``: ``2026-11-23``,
    ``2026-W48`` or ``2026-11``), created by the first charge or hold that touches it."""

    __tablename__ = "dataset_block"

    dataset_id: Mapped[str] = mapped_column(
        String(32), ForeignKey("dataset.id", ondelete="CASCADE"), primary_key=True
    )
    key: Mapped[str] = mapped_column(String(16), primary_key=True)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class AllocationBlock(_RunningTotals, Base):
    """Running totals of one allocation in one time block (an allocation of a partitioned
    dataset has its budget per block, as the dataset has)."""

    __tablename__ = "allocation_block"

    allocation_id: Mapped[str] = mapped_column(
        String(32), ForeignKey("allocation.id", ondelete="CASCADE"), primary_key=True
    )
    key: Mapped[str] = mapped_column(String(16), primary_key=True)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


__all__ = [
    "MAX_BIGINT",
    "Allocation",
    "AllocationBlock",
    "DatasetBlock",
    "ApiKey",
    "AppSetting",
    "AuditEvent",
    "Base",
    "Dataset",
    "DatasetPld",
    "DatasetTotal",
    "EntrySource",
    "IdempotencyRecord",
    "LedgerEntry",
    "Rejection",
    "Reservation",
    "ReservationStatus",
    "utcnow",
]
