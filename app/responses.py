"""The answers of the HTTP contract as Pydantic models (DESIGN.md, "HTTP contract").

Services build these values and return them; routes declare them as ``response_model`` so the
OpenAPI document shows real shapes; the client mirrors them. Infinite quantities (the pure-DP
epsilon of a Gaussian, the rho of a mechanism with no finite zCDP bound) are ``null``: JSON has
no infinity. Times are UTC, ISO 8601 with a ``Z``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, PrivateAttr


def _utc(ts: datetime) -> datetime:
    """SQLite returns naive datetimes, which are UTC by construction."""
    return ts.replace(tzinfo=UTC) if ts.tzinfo is None else ts.astimezone(UTC)


Timestamp = Annotated[datetime, AfterValidator(_utc)]
Mechanism = dict[str, Any]


class _Answer(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    _replayed: bool = PrivateAttr(default=False)
    """Whether this is the stored first answer to a retried Idempotency-Key (the route then
    says so in the ``Idempotent-Replayed`` header; the body is the first answer, unchanged)."""


class Budget(_Answer):
    epsilon: float
    delta: float


class Spent(_Answer):
    """Spend at the budget delta under the dataset's filter, and the composed totals."""

    epsilon: float | None = Field(
        description="epsilon at `delta` that the dataset's filter guarantees; null where no finite "
        "epsilon holds there (the entries' own deltas reach it, or pass an entry_delta_budget)"
    )
    delta: float
    rho: float | None = Field(description="composed zCDP rho (null if not finite)")
    pure_epsilon: float | None = Field(description="sum of pure-DP epsilons (null if infinite)")
    method: str = Field(description="the conversion that gave `epsilon`")
    filter: str = Field(description="the dataset's admission filter")


class Remaining(_Answer):
    """What is left: epsilon is an indication (composition is not additive: the filter
    decides); rho is exact for the rho filters."""

    epsilon: float = Field(
        description="budget epsilon minus spent epsilon: an indication only (composition is not "
        "additive, so a charge of more epsilon may still fit, or one of less may not: the "
        "filter decides; ask GET /calibrate or a dry run for what fits)"
    )
    delta: float
    rho: float | None = Field(
        description="rho budget minus rho spent under the rho filters (zcdp, gdp: exact, what "
        "the filter compares); null under the other filters"
    )
    entry_delta: float | None = Field(
        default=None,
        description="a dataset or allocation with an entry_delta_budget: what the deltas of "
        "mechanisms with their own delta may still add up to (after active holds); else null",
    )


class Reserved(_Answer):
    """Budget held by active reservations."""

    rho: float | None
    count: int
    epsilon: float | None = Field(
        default=0.0,
        description="the spend with the holds minus the spend without (never negative); null "
        "where either is not finite",
    )
    next_expiry: Timestamp | None = Field(default=None, description="the earliest hold's expiry")


BudgetState = Literal["ok", "warning", "exhausted"]
BudgetScope = Literal["dataset", "lifetime", "per_block"]
"""Which budget a dashboard read model's ``budget`` is (``Series``, ``Curves``): the dataset's,
a partitioned dataset's lifetime budget, or (a partitioned dataset without one) the budget of
each block, which the composition of all charges is not comparable with."""
_BUDGET_SCOPE = (
    "which budget `budget` is: dataset, lifetime (a partitioned dataset's lifetime budget) or "
    "per_block (a partitioned dataset without a lifetime budget: the budget of each block, not "
    "comparable with the spend here, which composes the charges of all blocks)"
)


class Dataset(_Answer):
    id: str
    name: str
    description: str | None
    budget: Budget
    accounting: str
    adaptive: bool
    allowed_mechanisms: list[str] | None
    filter: str
    filter_bound: dict[str, float] | None = Field(
        description="the rho filters' bound on the composed rho"
    )
    filter_params: dict[str, Any] | None = Field(
        default=None,
        description="rdp_fixed_orders: the Renyi orders, weights and thresholds fixed at creation",
    )
    entry_delta_budget: float = Field(
        default=0.0,
        description="adaptive filters: the part of the budget delta set aside at creation for "
        "mechanisms with their own delta (0: they are refused); per block when partitioned",
    )
    lifetime_entry_delta_budget: float = Field(
        default=0.0,
        description="partitioned datasets with a lifetime budget: the part of its delta set "
        "aside for mechanisms with their own delta (their deltas over all blocks)",
    )
    filter_description: str = Field(
        default="",
        description="what the filter guarantees, in plain words (e.g. 'Adaptive queries allowed "
        "(Rényi filter at a fixed order)')",
    )
    spent: Spent
    remaining: Remaining
    exhausted: bool
    entries: int
    mechanism_counts: dict[str, Any]
    created_at: Timestamp
    updated_at: Timestamp
    last_entry_at: Timestamp | None
    partition: Partition | None = Field(
        default=None, description="time partition: the budget applies to each block"
    )
    lifetime_budget: Budget | None = Field(
        default=None, description="cap on the composition of all charges (partitioned only)"
    )
    archived: bool = Field(
        default=False, description="archived: refuses charges and reservations; ledger readable"
    )
    archived_at: Timestamp | None = None
    reserved: Reserved | None = Field(
        default=None, description="active holds (null when none); `remaining` is after them"
    )
    state: BudgetState = Field(
        default="ok", description="ok, warning or exhausted (docs/operations.md, Warnings)"
    )
    warning_threshold: float = 0.8


class DatasetList(_Answer):
    datasets: list[Dataset]
    total: int


class BudgetView(_Answer):
    """``GET /budget``: O(1) in the ledger length."""

    dataset_id: str
    name: str
    budget: Budget
    spent: Spent
    remaining: Remaining
    exhausted: bool
    entries: int
    filter: str
    accounting: str
    adaptive: bool
    reserved: Reserved | None
    blocks: BlocksSummary | None = Field(
        default=None, description="partitioned datasets: most-spent block, exhausted blocks"
    )
    lifetime: Lifetime | None = Field(
        default=None, description="partitioned datasets: the spend of all charges composed"
    )
    state: BudgetState = Field(
        default="ok", description="ok, warning or exhausted (docs/operations.md, Warnings)"
    )
    warning_threshold: float = 0.8


class BlockSpan(_Answer):
    """An inclusive range of block keys of a partitioned dataset."""

    model_config = ConfigDict(
        frozen=True, extra="forbid", validate_by_name=True, serialize_by_alias=True
    )

    from_: str = Field(alias="from", serialization_alias="from")
    to: str


class ReservationList(_Answer):
    reservations: list[Reservation]
    total: int


class Entry(_Answer):
    """A ledger entry (append-only)."""

    id: int
    dataset_id: str
    seq: int
    created_at: Timestamp
    mechanism: Mechanism
    kind: str
    count: int
    label: str | None
    metadata: dict[str, Any] | None
    rho: float | None
    pure_epsilon: float | None
    spent_epsilon: float | None = Field(
        description="the dataset's spend right after this entry, as recorded at admission (null: "
        "not finite, as `spent`); a re-derivation under corrected formulas (verify --rebuild, "
        "migrate) does not rewrite it: the current spend is the dataset's `spent`"
    )
    source: str = Field(description="charge, reservation or reservation_expired")
    key_id: str | None
    reservation_id: str | None
    allocation_id: str | None = Field(default=None, description="the allocation charged")
    blocks: BlockSpan | None = Field(default=None, description="the block range charged")
    key_name: str | None = Field(default=None, description="the charging key's label")
    allocation_name: str | None = Field(
        default=None, description="the name of the allocation charged (its current name)"
    )


class Requested(_Answer):
    """What a charge asks for: the mechanism and its cost alone at the budget delta."""

    mechanism: Mechanism
    rho: float | None
    pure_epsilon: float | None
    epsilon: float


class Charge(_Answer):
    """``POST /charges`` (201): the new entry and the dataset's spend after it."""

    entry: Entry
    spent: Spent
    allocation: Allocation | None = Field(
        default=None, description="the allocation charged, after the charge"
    )
    blocks: list[Block] | None = Field(
        default=None, description="the blocks charged (partitioned datasets), after the charge"
    )
    allocation_blocks: list[Block] | None = Field(
        default=None, description="the allocation's share of each block charged, after it"
    )


class ChargeBatch(_Answer):
    """``POST /charges/dp_event`` (201): one entry per mechanism of the event, all admitted
    together, and the dataset's spend after them."""

    entries: list[Entry]
    spent: Spent


class DryRun(_Answer):
    """``POST /charges?dry_run=true`` (200): it would be admitted; nothing was recorded."""

    admitted: bool
    dry_run: bool
    spent: Spent = Field(description="the dataset's spend now (nothing was charged)")
    would_spend: Spent = Field(description="the dataset's spend after the charge")
    requested: Requested
    allocation: Allocation | None = Field(
        default=None, description="the allocation as it would be after the charge"
    )
    blocks: list[Block] | None = Field(
        default=None, description="the blocks as they would be after the charge"
    )
    allocation_blocks: list[Block] | None = None


class LedgerPage(_Answer):
    dataset_id: str
    entries: list[Entry]
    next_cursor: str | None
    total: int


class Reservation(_Answer):
    id: str
    dataset_id: str
    status: str = Field(description="active, committed, released or expired")
    mechanism: Mechanism
    label: str | None
    metadata: dict[str, Any] | None
    rho: float | None
    pure_epsilon: float | None
    created_at: Timestamp
    expires_at: Timestamp
    resolved_at: Timestamp | None
    ledger_entry_id: int | None
    key_id: str | None
    allocation_id: str | None = None
    blocks: BlockSpan | None = None
    key_name: str | None = Field(
        default=None, description="the reserving key's label (in the dataset's list of holds)"
    )
    resolved_by: str | None = Field(
        default=None,
        description="the id of the key that committed or released it (None while active, and "
        "for a hold charged at expiry)",
    )


class ReservationAnswer(Reservation):
    """A reservation with the dataset's spend (and, when just made, what it holds)."""

    spent: Spent
    requested: Requested | None = None


class Key(_Answer):
    """An API key as listed: never the secret, nor any part of it (``id`` is not derived from
    the key)."""

    id: str
    role: str
    datasets: list[str] | None
    allocations: list[str] | None = Field(
        default=None, description="allocations the key must charge to (null: not limited)"
    )
    label: str | None
    created_at: Timestamp
    created_by: str | None
    revoked_at: Timestamp | None
    revoked: bool


class KeyCreated(Key):
    """A new key: the only answer that shows the secret."""

    key: str


class KeyList(_Answer):
    keys: list[Key]


class Rejection(_Answer):
    """A refused charge or reservation, with the spend at that moment and the reason."""

    id: int
    dataset_id: str
    created_at: Timestamp
    operation: str
    mechanism: Mechanism
    label: str | None
    metadata: dict[str, Any] | None
    key_id: str | None
    key_name: str | None = Field(default=None, description="the key's label")
    reason: str
    spent: dict[str, Any]
    requested: dict[str, Any]
    budget: dict[str, Any]


class RejectionPage(_Answer):
    rejections: list[Rejection]
    next_cursor: str | None


class AuditEvent(_Answer):
    id: int
    created_at: Timestamp
    key_id: str | None
    action: str
    dataset_id: str | None
    target_id: str | None
    details: dict[str, Any]


class AuditPage(_Answer):
    events: list[AuditEvent]


class SpendQuery(_Answer):
    """epsilon at another delta, or delta at an epsilon, under the dataset's filter."""

    dataset_id: str
    epsilon: float | None = Field(
        description="null when no finite epsilon holds at this delta (the distribution, or the "
        "entries' own deltas, reach it)"
    )
    delta: float
    method: str
    order: float | None
    filter: str
    rho: float | None
    conversions: dict[str, float]
    entries: int


class Adds(_Answer):
    rho: float | None
    pure_epsilon: float | None


class Calibration(_Answer):
    """The least noise (or largest epsilon / most steps) a next invocation may use and fit."""

    dataset_id: str
    mechanism: Mechanism
    parameter: str
    value: int | float = Field(description="an integer for steps")
    direction: str = Field(description="min: least value that fits; max: largest")
    adds: Adds
    spent_after: Spent
    filter: str


class Composition(_Answer):
    """``POST /v1/accounting/compose``: the tightest non-adaptive conversion."""

    accounting: str
    delta: float
    epsilon: float
    method: str
    order: float | None
    rho: float | None
    pure_epsilon: float | None
    gaussian_only: bool
    orders: list[float]
    rdp: list[float | None]
    conversions: dict[str, float]


class SeriesPoint(_Answer):
    seq: int
    created_at: Timestamp
    kind: str
    epsilon: float | None = Field(description="the spend after this entry (null: not finite)")


class BudgetChange(_Answer):
    """A change of a dataset's budget (from the audit trail), for marking the spend chart."""

    created_at: Timestamp
    action: str
    old: dict[str, float] | None
    new: dict[str, float] | None


class Series(_Answer):
    dataset_id: str
    entries: int
    downsampled: bool
    budget: Budget
    points: list[SeriesPoint]
    budget_changes: list[BudgetChange] = Field(
        default_factory=list, description="budget changes, oldest first (at most 200)"
    )
    budget_scope: BudgetScope = Field(default="dataset", description=_BUDGET_SCOPE)


class TradeoffPoint(_Answer):
    delta: float
    epsilon: float | None
    method: str


class SpentAtOrder(Spent):
    order: float | None


class Curves(_Answer):
    dataset_id: str
    filter: str
    budget: Budget
    spent: SpentAtOrder
    orders: list[float]
    rdp: list[float | None]
    budget_rdp: list[float | None]
    tradeoff: list[TradeoffPoint]
    budget_scope: BudgetScope = Field(default="dataset", description=_BUDGET_SCOPE)


class VerifiedDataset(_Answer):
    model_config = ConfigDict(extra="allow")

    dataset_id: str
    name: str
    entries: int
    ok: bool
    drift: list[str]
    entries_with_curve_mismatch: list[int] = Field(
        description="ids of entries whose stored curve is not their mechanism's, the first 100 "
        "by ledger position (all of them: entries_with_curve_mismatch_count)"
    )
    entries_with_curve_mismatch_count: int = 0
    entries_with_curve_mismatch_truncated: bool = Field(
        default=False, description="more entries have a stale curve than are listed"
    )
    entries_with_curve_mismatch_seq_range: list[int] | None = Field(
        default=None,
        description="[first, last] ledger seq of all entries with a stale curve (not every "
        "entry between them is one)",
    )
    holds_with_curve_mismatch: list[str] = Field(
        default_factory=list,
        description="ids of active holds whose stored curve is stale, the first 100",
    )
    holds_with_curve_mismatch_count: int = 0
    holds_with_curve_mismatch_truncated: bool = False


class VerifyReport(_Answer):
    ok: bool
    datasets: list[VerifiedDataset]


# --- budget structures (issue 15) -------------------------------------------------------------


class Partition(_Answer):
    unit: str = Field(description="day, week or month (UTC)")
    max_span: int = Field(description="most blocks one charge, reservation or listing covers")


class Block(_Answer):
    """One block of a partitioned dataset (or an allocation's share of it)."""

    block: str
    spent: Spent
    remaining: Remaining
    exhausted: bool
    entries: int
    reserved: Reserved | None = None


class BlockList(_Answer):
    dataset_id: str
    unit: str
    allocation: str | None = None
    blocks: list[Block]


class BlocksSummary(_Answer):
    unit: str
    most_spent: Block | None = Field(description="the block with the largest spend")
    exhausted_blocks: int
    charged_blocks: int


class Lifetime(_Answer):
    """The composition of every charge of a partitioned dataset against its lifetime budget
    (``budget`` null: none set; ``spent`` is then under the per-block budget's filter)."""

    budget: Budget | None
    spent: Spent
    remaining: Remaining | None
    exhausted: bool
    filter_params: dict[str, Any] | None = Field(
        default=None,
        description="rdp_fixed_orders: the Renyi orders, weights and thresholds the lifetime "
        "budget's filter fixed when the budget was set (as the dataset's filter_params)",
    )


class Allocation(_Answer):
    """A sub-budget of a dataset. On a partitioned dataset its budget applies to each block:
    ``spent``, ``remaining`` and ``exhausted`` are those of its most-spent block
    (``most_spent_block``) and ``lifetime_spent`` composes all its charges."""

    id: str
    dataset_id: str
    name: str
    budget: Budget
    spent: Spent
    remaining: Remaining
    exhausted: bool
    entries: int
    reserved: Reserved | None = None
    entry_delta_budget: float = Field(
        default=0.0,
        description="the part of the allocation's delta set aside for mechanisms with their own "
        "delta (0: refused through it)",
    )
    filter_params: dict[str, Any] | None = Field(
        default=None,
        description="rdp_fixed_orders: the Renyi orders, weights and thresholds fixed for the "
        "allocation's own budget at its creation (as the dataset's filter_params)",
    )
    most_spent_block: str | None = None
    lifetime_spent: Spent | None = None
    created_at: Timestamp | None = None
    updated_at: Timestamp | None = None


class AllocationList(_Answer):
    dataset_id: str
    allocations: list[Allocation]


class MechanismField(_Answer):
    """One field of a mechanism kind (``GET /v1/mechanisms``)."""

    name: str
    type: str = Field(description="float, int or float_list (a list of floats)")
    required: bool
    default: Any = Field(description="the value when the field is left out (null: none)")
    minimum: float | None
    maximum: float | None
    exclusive_minimum: bool
    exclusive_maximum: bool
    max_items: int | None = Field(description="float_list fields: at most this many values")
    unit: str
    help: str


class NextQuery(_Answer):
    """The calibration the dashboard shows for a kind: GET /calibrate with ``fixed``."""

    fixed: dict[str, float | int | str] = Field(
        description="the query's other parameters (and parameter, when not the first)"
    )
    words: str = Field(description="those parameters in plain words")


class MechanismKind(_Answer):
    """A mechanism kind of the registry, as a charge's ``mechanism`` object takes it."""

    name: str
    title: str = Field(description="its short name for people")
    description: str
    neighbours: str = Field(description="the neighbouring relation and parameter convention")
    fields: list[MechanismField]
    one_of: list[list[str]] = Field(
        description="alternative forms: exactly one group of fields is given (Laplace)"
    )
    calibration: dict[str, str] = Field(
        description="parameter -> min (least value that fits) or max; the first is the default"
    )
    accountings: list[str] = Field(description="the dataset accountings that admit this kind")
    pld: bool = Field(description="whether pld datasets (and compose) take it")
    own_delta: bool = Field(
        description="whether it may carry its own delta (adaptive filters admit it only within "
        "their entry_delta_budget)"
    )
    dp_events: list[str] = Field(description="dp_accounting event types translated to it")
    next_query: NextQuery | None = Field(
        description="what the dashboard asks GET /calibrate for it (null: not offered there)"
    )


class MechanismCatalogue(_Answer):
    """``GET /v1/mechanisms``: every kind a charge, reservation or compose accepts."""

    mechanisms: list[MechanismKind]
    dp_events: list[str] = Field(
        description="every dp_accounting event type a dp_event body may use"
    )


__all__ = [
    "Allocation",
    "AllocationList",
    "Block",
    "BlockList",
    "BlockSpan",
    "BlocksSummary",
    "Lifetime",
    "Partition",
    "ChargeBatch",
    "MechanismCatalogue",
    "MechanismField",
    "MechanismKind",
    "NextQuery",
    "Adds",
    "AuditEvent",
    "AuditPage",
    "Budget",
    "BudgetView",
    "Calibration",
    "Charge",
    "Composition",
    "Curves",
    "Dataset",
    "DatasetList",
    "DryRun",
    "Entry",
    "Key",
    "KeyCreated",
    "KeyList",
    "LedgerPage",
    "Rejection",
    "RejectionPage",
    "Remaining",
    "Requested",
    "Reservation",
    "ReservationAnswer",
    "Reserved",
    "ReservationList",
    "BudgetScope",
    "BudgetState",
    "Series",
    "SeriesPoint",
    "Spent",
    "SpentAtOrder",
    "SpendQuery",
    "TradeoffPoint",
    "Timestamp",
    "VerifiedDataset",
    "VerifyReport",
]
