"""Typed answers: frozen dataclasses mirroring the server's JSON, read tolerantly.

The server may add fields at any time (the HTTP contract is extended, never renamed), so
:func:`parse` ignores keys it does not know and fills a missing optional field with its default
(``None``). A missing *required* field, or a value of the wrong JSON type, raises ``ValueError``
(the client turns it into ``DecodingError``). Every answer keeps the JSON it was read from in
``raw``, so a field added by a newer server is readable before this client names it.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar, Union

M = TypeVar("M", bound="Model")


@dataclass(frozen=True, kw_only=True)
class Model:
    """Base of every answer: ``raw`` is the JSON object the answer was read from."""

    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)


# --- spend and budget ------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Budget(Model):
    """A dataset's budget: (epsilon, delta)-DP."""

    epsilon: float
    delta: float


@dataclass(frozen=True, kw_only=True)
class Spent(Model):
    """Spend at the budget delta under the dataset's filter, with the conversion that gave it
    (``epsilon`` is None where no finite epsilon holds there: the entries' own deltas reach it)."""

    epsilon: float | None
    delta: float
    rho: float | None = None
    pure_epsilon: float | None = None
    method: str | None = None
    filter: str | None = None


@dataclass(frozen=True, kw_only=True)
class Remaining(Model):
    """What is left: epsilon (an indication; the filter decides) and, for rho filters, rho."""

    epsilon: float
    delta: float | None = None
    rho: float | None = None
    entry_delta: float | None = None  # what own deltas may still add up to (a split's room)


@dataclass(frozen=True, kw_only=True)
class Requested(Model):
    """A mechanism as charged or refused, with its cost alone at the budget delta."""

    mechanism: dict[str, Any]
    rho: float | None = None
    pure_epsilon: float | None = None
    epsilon: float | None = None


# --- datasets ---------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Dataset(Model):
    """A dataset with its budget and current spend."""

    id: str
    name: str
    budget: Budget
    spent: Spent
    remaining: Remaining
    exhausted: bool
    entries: int
    description: str | None = None
    accounting: str | None = None
    adaptive: bool | None = None
    allowed_mechanisms: list[str] | None = None
    filter: str | None = None
    filter_bound: dict[str, float] | None = None
    filter_params: dict[str, Any] | None = None
    """``rdp_fixed_orders``: the Renyi orders, weights and thresholds fixed at creation."""
    entry_delta_budget: float = 0.0
    lifetime_entry_delta_budget: float = 0.0
    mechanism_counts: dict[str, dict[str, Any]] | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None
    last_entry_at: datetime | None = None


@dataclass(frozen=True, kw_only=True)
class DatasetPage(Model):
    """One page of ``GET /v1/datasets`` (by name); ``total`` counts every page's datasets."""

    datasets: list[Dataset]
    total: int | None = None


@dataclass(frozen=True, kw_only=True)
class Reserved(Model):
    """Budget held by active reservations: their ``count``, ``rho``, ``epsilon`` (the spend
    with them minus the spend without) and the earliest expiry among them, ``next_expiry``
    (a dataset's, an allocation's or a block's own holds)."""

    count: int
    rho: float | None = None
    epsilon: float | None = 0.0
    next_expiry: datetime | None = None


@dataclass(frozen=True, kw_only=True)
class BudgetStatus(Model):
    """``GET /budget``: budget, spend, what is left (after active holds) and the entry count."""

    dataset_id: str
    budget: Budget
    spent: Spent
    remaining: Remaining
    exhausted: bool
    entries: int
    name: str | None = None
    filter: str | None = None
    accounting: str | None = None
    adaptive: bool | None = None
    reserved: Reserved | None = None
    blocks: dict[str, Any] | None = None  # partitioned: unit, most_spent, exhausted_blocks
    lifetime: dict[str, Any] | None = None  # partitioned: the composition of all charges


@dataclass(frozen=True, kw_only=True)
class SpendQuery(Model):
    """``GET /spend``: epsilon at another delta, or delta at an epsilon (``epsilon`` is None
    when no finite epsilon holds at that delta)."""

    epsilon: float | None
    delta: float
    dataset_id: str | None = None
    method: str | None = None
    order: float | None = None
    filter: str | None = None
    rho: float | None = None
    conversions: dict[str, float] | None = None
    entries: int | None = None


# --- ledger -----------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class LedgerEntry(Model):
    """One recorded mechanism invocation."""

    id: int
    dataset_id: str
    mechanism: dict[str, Any]
    seq: int | None = None
    kind: str | None = None
    count: int | None = None
    label: str | None = None
    metadata: dict[str, Any] | None = None
    rho: float | None = None
    pure_epsilon: float | None = None
    spent_epsilon: float | None = None
    source: str | None = None
    key_id: str | None = None
    reservation_id: str | None = None
    created_at: datetime | None = None
    allocation_id: str | None = None
    blocks: dict[str, str] | None = None  # {"from": key, "to": key}
    key_name: str | None = None  # the charging key's label
    allocation_name: str | None = None  # the allocation charged, by name


@dataclass(frozen=True, kw_only=True)
class Block(Model):
    """One block of a partitioned dataset (or an allocation's share of it)."""

    block: str
    spent: Spent
    remaining: Remaining
    exhausted: bool
    entries: int | None = None
    reserved: Reserved | None = None


@dataclass(frozen=True, kw_only=True)
class Allocation(Model):
    """A sub-budget of a dataset. On a partitioned dataset ``spent`` / ``remaining`` /
    ``exhausted`` are those of its most-spent block, ``lifetime_spent`` composes all its
    charges."""

    id: str
    name: str
    budget: Budget
    spent: Spent
    remaining: Remaining
    exhausted: bool
    dataset_id: str | None = None
    entries: int | None = None
    reserved: Reserved | None = None
    entry_delta_budget: float = 0.0
    filter_params: dict[str, Any] | None = None
    """``rdp_fixed_orders``: the orders and thresholds fixed for the allocation's own budget."""
    most_spent_block: str | None = None
    lifetime_spent: Spent | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None


@dataclass(frozen=True, kw_only=True)
class Charge(Model):
    """A recorded charge: the ledger entry and the dataset's spend after it (with the
    allocation and blocks charged, when there are any)."""

    entry: LedgerEntry
    spent: Spent
    allocation: Allocation | None = None
    blocks: list[Block] | None = None
    allocation_blocks: list[Block] | None = None
    replayed: bool = False
    """True when the server answered a retried Idempotency-Key with this stored first answer
    (its ``Idempotent-Replayed`` header): nothing was charged again."""


@dataclass(frozen=True, kw_only=True)
class ChargeBatch(Model):
    """A charged DpEvent: one ledger entry per mechanism (all admitted together) and the
    dataset's spend after them."""

    entries: list[LedgerEntry]
    spent: Spent
    replayed: bool = False
    """As ``Charge.replayed``."""


@dataclass(frozen=True, kw_only=True)
class DryRun(Model):
    """A dry run that would be admitted (a refusal raises ``BudgetExceeded``)."""

    admitted: bool
    spent: Spent
    would_spend: Spent
    requested: Requested | None = None
    allocation: Allocation | None = None
    blocks: list[Block] | None = None
    allocation_blocks: list[Block] | None = None


@dataclass(frozen=True, kw_only=True)
class LedgerPage(Model):
    """Ledger entries, newest first; ``next_cursor`` fetches the next page."""

    entries: list[LedgerEntry]
    dataset_id: str | None = None
    next_cursor: str | None = None
    total: int | None = None


# --- planning ---------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Calibration(Model):
    """The least noise (or largest epsilon, most steps) a next invocation may use and fit:
    ``mechanism`` is complete and ready to charge."""

    mechanism: dict[str, Any]
    parameter: str
    value: float | int
    dataset_id: str | None = None
    direction: str | None = None
    adds: dict[str, float | None] | None = None
    spent_after: Spent | None = None
    filter: str | None = None


@dataclass(frozen=True, kw_only=True)
class Composition(Model):
    """A stateless what-if: epsilon at ``delta`` of a fixed list of mechanisms.
    ``conversions`` lists every candidate conversion; ``epsilon`` is the least of them."""

    epsilon: float
    delta: float
    accounting: str | None = None
    method: str | None = None
    order: float | None = None
    rho: float | None = None
    pure_epsilon: float | None = None
    gaussian_only: bool | None = None
    orders: list[float] | None = None
    rdp: list[float | None] | None = None
    conversions: dict[str, float] | None = None


# --- reservations -----------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Reservation(Model):
    """A hold on budget: ``active``, then ``committed``, ``released`` or ``expired``."""

    id: str
    status: str
    dataset_id: str | None = None
    mechanism: dict[str, Any] | None = None
    label: str | None = None
    metadata: dict[str, Any] | None = None
    rho: float | None = None
    pure_epsilon: float | None = None
    created_at: datetime | None = None
    expires_at: datetime | None = None
    resolved_at: datetime | None = None
    ledger_entry_id: int | None = None
    key_id: str | None = None
    spent: Spent | None = None
    allocation_id: str | None = None
    blocks: dict[str, str] | None = None
    key_name: str | None = None  # the reserving key's label (in a dataset's list of holds)
    resolved_by: str | None = None  # the id of the key that committed or released it
    replayed: bool = False
    """True when a retried Idempotency-Key was answered with this stored first answer (the
    reservation made then; nothing more was held)."""


# --- administration ---------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class ApiKey(Model):
    """An API key as listed (never its secret)."""

    id: str
    role: str
    prefix: str | None = None
    datasets: list[str] | None = None
    allocations: list[str] | None = None
    label: str | None = None
    created_at: datetime | None = None
    created_by: str | None = None
    revoked_at: datetime | None = None
    revoked: bool | None = None


@dataclass(frozen=True, kw_only=True)
class NewApiKey(ApiKey):
    """A key just created: ``key`` is the secret, shown this once."""

    key: str


@dataclass(frozen=True, kw_only=True)
class Rejection(Model):
    """A refused charge or reservation, with the spend at that moment."""

    id: int
    dataset_id: str
    reason: str | None = None
    operation: str | None = None
    mechanism: dict[str, Any] | None = None
    label: str | None = None
    metadata: dict[str, Any] | None = None
    key_id: str | None = None
    spent: Spent | None = None
    requested: Requested | None = None
    budget: Budget | None = None
    created_at: datetime | None = None


@dataclass(frozen=True, kw_only=True)
class RejectionPage(Model):
    """Rejections, newest first; ``next_cursor`` fetches the next page."""

    rejections: list[Rejection]
    next_cursor: str | None = None


@dataclass(frozen=True, kw_only=True)
class AuditEvent(Model):
    """One audit trail event (budget, dataset and key changes)."""

    id: int
    action: str
    created_at: datetime | None = None
    key_id: str | None = None
    dataset_id: str | None = None
    target_id: str | None = None
    details: dict[str, Any] | None = None


# --- tolerant reading -------------------------------------------------------------------------


def parse(cls: type[M], data: Any, path: str = "") -> M:
    """Read ``data`` (a JSON object) as ``cls``: unknown keys ignored, missing optional fields
    defaulted, nested answers read recursively. ``ValueError`` names the offending path."""
    where = path or cls.__name__
    if not isinstance(data, dict):
        raise ValueError(f"{where}: expected a JSON object, got {type(data).__name__}")
    values: dict[str, Any] = {"raw": data}
    for name, hint, required in _fields(cls):
        if name not in data:
            if required:
                raise ValueError(f"{where}: the field {name!r} is missing")
            continue
        values[name] = _convert(hint, data[name], f"{where}.{name}")
    return cls(**values)


def parse_or_none(cls: type[M], data: Any) -> M | None:
    """``parse``, or None when ``data`` is absent or does not have the expected shape."""
    try:
        return parse(cls, data)
    except ValueError:
        return None


_FIELDS: dict[type[Model], tuple[tuple[str, Any, bool], ...]] = {}


def _fields(cls: type[Model]) -> tuple[tuple[str, Any, bool], ...]:
    """(name, type hint, required) of each field but ``raw``, resolved once per class."""
    cached = _FIELDS.get(cls)
    if cached is not None:
        return cached
    hints = typing.get_type_hints(cls)
    _FIELDS[cls] = fields = tuple(
        (
            f.name,
            hints[f.name],
            f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING,
        )
        for f in dataclasses.fields(cls)
        if f.name != "raw"
    )
    return fields


def _convert(hint: Any, value: Any, path: str) -> Any:
    origin = typing.get_origin(hint)
    if hint is Any:
        return value
    if origin is Union or origin is types.UnionType:
        arms = [a for a in typing.get_args(hint) if a is not type(None)]
        if value is None:
            return None
        if len(arms) == 1:
            return _convert(arms[0], value, path)
        return value
    if value is None:
        raise ValueError(f"{path}: null where a value is required")
    if origin is list:
        if not isinstance(value, list):
            raise ValueError(f"{path}: expected a list, got {type(value).__name__}")
        (item,) = typing.get_args(hint)
        return [_convert(item, v, f"{path}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ValueError(f"{path}: expected an object, got {type(value).__name__}")
        _, item = typing.get_args(hint)
        return {k: _convert(item, v, f"{path}.{k}") for k, v in value.items()}
    if isinstance(hint, type) and issubclass(hint, Model):
        return parse(hint, value, path)
    if hint is datetime:
        if not isinstance(value, str):
            raise ValueError(f"{path}: expected an ISO 8601 timestamp, got {value!r}")
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"{path}: expected a number, got {value!r}")
        return float(value)
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{path}: expected an integer, got {value!r}")
        return value
    if hint in (str, bool) and not isinstance(value, hint):
        raise ValueError(f"{path}: expected {hint.__name__}, got {value!r}")
    return value


__all__ = [
    "ApiKey",
    "AuditEvent",
    "Budget",
    "BudgetStatus",
    "Calibration",
    "Charge",
    "ChargeBatch",
    "Composition",
    "Dataset",
    "DatasetPage",
    "DryRun",
    "LedgerEntry",
    "LedgerPage",
    "Model",
    "NewApiKey",
    "Rejection",
    "RejectionPage",
    "Remaining",
    "Requested",
    "Reservation",
    "Reserved",
    "SpendQuery",
    "Spent",
    "parse",
    "parse_or_none",
]
