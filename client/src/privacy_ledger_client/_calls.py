"""Every API operation as a ``Call``: what to send, how to read the answer, whether to repeat it.

The sync and async clients share these descriptions and differ only in how they send them, so
an operation is written once. A call is built once per logical request and reused across its
retries: a charge's ``Idempotency-Key`` is chosen here, so every attempt carries the same one.
An operation of several requests (reading every page of a listing) is a ``Plan``: a generator
that yields each call and is sent its answer, driven by either client's ``run``.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeAlias, TypeVar
from urllib.parse import quote

from privacy_ledger_client._models import (
    Allocation,
    ApiKey,
    AuditEvent,
    Block,
    BudgetStatus,
    Calibration,
    Charge,
    ChargeBatch,
    Composition,
    Dataset,
    DatasetPage,
    DryRun,
    LedgerPage,
    M,
    NewApiKey,
    RejectionPage,
    Reservation,
    SpendQuery,
    parse,
)

T = TypeVar("T")


class Delivery(enum.Enum):
    """Whether a request may be sent again after a failure that leaves its fate unknown."""

    SAFE = "safe"
    """Repeating it is harmless: reads, idempotent writes, charges with their Idempotency-Key."""
    UNSENT_ONLY = "unsent-only"
    """Repeat only when it surely never reached the server (the connection was refused)."""


@dataclass(frozen=True)
class Call(Generic[T]):
    """One logical request and the reader of its answer."""

    method: str
    path: str
    read: Callable[[Any], T]
    json: Any = None
    params: Mapping[str, Any] | None = None
    headers: Mapping[str, str] | None = None
    ok: frozenset[int] = frozenset({200, 201})
    delivery: Delivery = Delivery.SAFE


Plan: TypeAlias = Generator[Call[Any], Any, T]
"""Several requests as one operation: the generator yields each ``Call``, is sent its typed
answer, and returns the result. Errors and retries are the sending client's, per call."""


def _seg(ref: str) -> str:
    """A dataset name or id as one path segment (names may hold any character)."""
    return quote(str(ref), safe="")


def _one(cls: type[M]) -> Callable[[Any], M]:
    return lambda data: parse(cls, data)


def _many(cls: type[M], key: str) -> Callable[[Any], list[M]]:
    def read(data: Any) -> list[M]:
        if not isinstance(data, dict) or not isinstance(data.get(key), list):
            raise ValueError(f"expected an object with a list {key!r}")
        return [parse(cls, item, f"{key}[{i}]") for i, item in enumerate(data[key])]

    return read


def _drop_none(values: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}


def _identity(data: Any) -> Any:
    return data


# --- accounting -------------------------------------------------------------------------------


def compose(
    mechanisms: Sequence[Mapping[str, Any]], delta: float, accounting: str
) -> Call[Composition]:
    body = {"mechanisms": [dict(m) for m in mechanisms], "delta": delta, "accounting": accounting}
    return Call("POST", "/v1/accounting/compose", _one(Composition), json=body)


# --- datasets ---------------------------------------------------------------------------------


DATASET_PAGE = 1000
"""Datasets per request when listing them all (the server's largest ``limit``)."""


def dataset_page(archived: str | None, offset: int, limit: int) -> Call[DatasetPage]:
    params = _drop_none({"archived": archived, "offset": offset, "limit": limit})
    return Call("GET", "/v1/datasets", _one(DatasetPage), params=params)


def datasets(archived: str | None = None) -> Plan[list[Dataset]]:
    """Every dataset, one page after another by name, until the server's ``total`` is reached
    (without ``total``: until a short page), stopping early at an empty page. A dataset met
    twice (a dataset created meanwhile shifted the names between pages) is listed once."""
    found: dict[str, Dataset] = {}
    offset = 0
    while True:  # each page is non-empty, so this ends once the offset passes the total
        page: DatasetPage = yield dataset_page(archived, offset, DATASET_PAGE)
        for d in page.datasets:
            found.setdefault(d.id, d)
        offset += len(page.datasets)
        last = len(page.datasets) < DATASET_PAGE if page.total is None else offset >= page.total
        if last or not page.datasets:
            return list(found.values())


def dataset(ref: str) -> Call[Dataset]:
    return Call("GET", f"/v1/datasets/{_seg(ref)}", _one(Dataset))


def create_dataset(
    name: str, epsilon: float, delta: float, fields: Mapping[str, Any]
) -> Call[Dataset]:
    body = {"name": name, "budget": {"epsilon": epsilon, "delta": delta}, **fields}
    return Call("POST", "/v1/datasets", _one(Dataset), json=body, delivery=Delivery.UNSENT_ONLY)


def update_dataset(ref: str, changes: Mapping[str, Any]) -> Call[Dataset]:
    return Call("PATCH", f"/v1/datasets/{_seg(ref)}", _one(Dataset), json=dict(changes))


def archive_dataset(ref: str, archived: bool) -> Call[Dataset]:
    action = "archive" if archived else "unarchive"
    return Call("POST", f"/v1/datasets/{_seg(ref)}/{action}", _one(Dataset))


def budget(ref: str) -> Call[BudgetStatus]:
    return Call("GET", f"/v1/datasets/{_seg(ref)}/budget", _one(BudgetStatus))


def spend(ref: str, delta: float | None, epsilon: float | None) -> Call[SpendQuery]:
    if (delta is None) == (epsilon is None):
        raise ValueError("give exactly one of delta or epsilon")
    params = _drop_none({"delta": delta, "epsilon": epsilon})
    return Call("GET", f"/v1/datasets/{_seg(ref)}/spend", _one(SpendQuery), params=params)


def ledger(
    ref: str, limit: int, cursor: str | None, filters: Mapping[str, Any] | None = None
) -> Call[LedgerPage]:
    params = _drop_none({"limit": limit, "cursor": cursor, **(filters or {})})
    return Call("GET", f"/v1/datasets/{_seg(ref)}/ledger", _one(LedgerPage), params=params)


EXPORT_FORMATS = ("csv", "jsonl")


def export_ledger(ref: str, fmt: str, filters: Mapping[str, Any] | None = None) -> Call[None]:
    """The whole (filtered) ledger as the server exports it; the answer is text, streamed by
    the client (``read`` is never called)."""
    if fmt not in EXPORT_FORMATS:
        raise ValueError(f"format must be csv or jsonl, got {fmt!r}")
    params = _drop_none({"format": fmt, **(filters or {})})
    return Call(
        "GET", f"/v1/datasets/{_seg(ref)}/ledger", _none, params=params, ok=frozenset({200})
    )


def _none(data: Any) -> None:
    return None


def calibrate(
    ref: str,
    kind: str,
    parameter: str | None,
    fixed: Mapping[str, Any],
    allocation: str | None = None,
    blocks: tuple[str, str] | None = None,
) -> Call[Calibration]:
    first, last = blocks if blocks is not None else (None, None)
    params = _drop_none(
        {
            "mechanism": kind,
            "parameter": parameter,
            **fixed,
            "allocation": allocation,
            "block_from": first,
            "block_to": last,
        }
    )
    return Call("GET", f"/v1/datasets/{_seg(ref)}/calibrate", _one(Calibration), params=params)


# --- charges and reservations -----------------------------------------------------------------


def _structures(allocation: str | None, blocks: tuple[str, str] | None) -> dict[str, Any]:
    """The budget-structure members of a charge or reservation (sent only when given)."""
    out: dict[str, Any] = {}
    if allocation is not None:
        out["allocation"] = allocation
    if blocks is not None:
        first, last = blocks
        out["blocks"] = {"from": first, "to": last}
    return out


def charge(
    ref: str,
    mechanism: Mapping[str, Any],
    label: str | None,
    metadata: Mapping[str, Any] | None,
    idempotency_key: str | None,
    allocation: str | None = None,
    blocks: tuple[str, str] | None = None,
) -> Call[Charge]:
    body = {
        "mechanism": dict(mechanism),
        "label": label,
        "metadata": metadata,
        **_structures(allocation, blocks),
    }
    headers = {"Idempotency-Key": idempotency_key or str(uuid.uuid4())}
    return Call(
        "POST", f"/v1/datasets/{_seg(ref)}/charges", _one(Charge), json=body, headers=headers
    )


def charge_dp_event(
    ref: str,
    event: Mapping[str, Any],
    label: str | None,
    metadata: Mapping[str, Any] | None,
    idempotency_key: str | None,
) -> Call[ChargeBatch]:
    body = {"dp_event": dict(event), "label": label, "metadata": metadata}
    headers = {"Idempotency-Key": idempotency_key or str(uuid.uuid4())}
    return Call(
        "POST",
        f"/v1/datasets/{_seg(ref)}/charges/dp_event",
        _one(ChargeBatch),
        json=body,
        headers=headers,
    )


def dry_run_dp_event(ref: str, event: Mapping[str, Any]) -> Call[DryRun]:
    return Call(
        "POST",
        f"/v1/datasets/{_seg(ref)}/charges/dp_event",
        _one(DryRun),
        json={"dp_event": dict(event)},
        params={"dry_run": "true"},
    )


def dry_run(
    ref: str,
    mechanism: Mapping[str, Any],
    allocation: str | None = None,
    blocks: tuple[str, str] | None = None,
) -> Call[DryRun]:
    return Call(
        "POST",
        f"/v1/datasets/{_seg(ref)}/charges",
        _one(DryRun),
        json={"mechanism": dict(mechanism), **_structures(allocation, blocks)},
        params={"dry_run": "true"},
    )


def reserve(
    ref: str,
    mechanism: Mapping[str, Any],
    ttl_seconds: int,
    label: str | None,
    metadata: Mapping[str, Any] | None,
    allocation: str | None = None,
    blocks: tuple[str, str] | None = None,
) -> Call[Reservation]:
    body = {
        "mechanism": dict(mechanism),
        "ttl_seconds": ttl_seconds,
        "label": label,
        "metadata": metadata,
        **_structures(allocation, blocks),
    }
    # a lost answer would leave a hold that expires and is charged: send twice only if unsent
    return Call(
        "POST",
        f"/v1/datasets/{_seg(ref)}/reservations",
        _one(Reservation),
        json=body,
        delivery=Delivery.UNSENT_ONLY,
    )


def reservation(reservation_id: str) -> Call[Reservation]:
    return Call("GET", f"/v1/reservations/{_seg(reservation_id)}", _one(Reservation))


def commit(reservation_id: str) -> Call[Reservation]:
    return Call("POST", f"/v1/reservations/{_seg(reservation_id)}/commit", _one(Reservation))


def release(reservation_id: str) -> Call[Reservation]:
    return Call("DELETE", f"/v1/reservations/{_seg(reservation_id)}", _one(Reservation))


# --- budget structures: allocations and blocks ------------------------------------------------


def create_allocation(
    ref: str, name: str, epsilon: float, delta: float, entry_delta_budget: float | None = None
) -> Call[Allocation]:
    body: dict[str, Any] = {"name": name, "budget": {"epsilon": epsilon, "delta": delta}}
    if entry_delta_budget is not None:
        body["entry_delta_budget"] = entry_delta_budget
    return Call(
        "POST",
        f"/v1/datasets/{_seg(ref)}/allocations",
        _one(Allocation),
        json=body,
        delivery=Delivery.UNSENT_ONLY,
    )


def allocations(ref: str) -> Call[list[Allocation]]:
    return Call("GET", f"/v1/datasets/{_seg(ref)}/allocations", _many(Allocation, "allocations"))


def allocation(ref: str, name: str) -> Call[Allocation]:
    return Call("GET", f"/v1/datasets/{_seg(ref)}/allocations/{_seg(name)}", _one(Allocation))


def update_allocation(
    ref: str, name: str, epsilon: float | None, delta: float | None
) -> Call[Allocation]:
    body = {"budget": _drop_none({"epsilon": epsilon, "delta": delta})}
    return Call(
        "PATCH", f"/v1/datasets/{_seg(ref)}/allocations/{_seg(name)}", _one(Allocation), json=body
    )


def blocks(ref: str, first: str, last: str, allocation: str | None) -> Call[list[Block]]:
    params = _drop_none({"from": first, "to": last, "allocation": allocation})
    return Call("GET", f"/v1/datasets/{_seg(ref)}/blocks", _many(Block, "blocks"), params=params)


# --- administration ---------------------------------------------------------------------------


def create_key(
    role: str,
    datasets: Sequence[str] | None,
    label: str | None,
    allocations: Sequence[str] | None = None,
) -> Call[NewApiKey]:
    body: dict[str, Any] = {
        "role": role,
        # an empty list is sent as such (the server refuses it, 422): never widened to None,
        # which means every dataset
        "datasets": list(datasets) if datasets is not None else None,
        "label": label,
    }
    if allocations is not None:
        body["allocations"] = list(allocations)
    return Call("POST", "/v1/keys", _one(NewApiKey), json=body, delivery=Delivery.UNSENT_ONLY)


def keys() -> Call[list[ApiKey]]:
    return Call("GET", "/v1/keys", _many(ApiKey, "keys"))


def revoke_key(key_id: str) -> Call[ApiKey]:
    return Call("DELETE", f"/v1/keys/{_seg(key_id)}", _one(ApiKey))


def rejections(dataset: str | None, limit: int, cursor: str | None) -> Call[RejectionPage]:
    """One dataset's refusals from its own route (a viewer key reads them), all datasets'
    from ``/v1/rejections`` (an admin key)."""
    params = _drop_none({"limit": limit, "cursor": cursor})
    if dataset is not None:
        path = f"/v1/datasets/{_seg(dataset)}/rejections"
        return Call("GET", path, _one(RejectionPage), params=params)
    return Call("GET", "/v1/rejections", _one(RejectionPage), params=params)


def audit(
    dataset: str | None, action: str | None, limit: int, before_id: int | None
) -> Call[list[AuditEvent]]:
    params = _drop_none(
        {"dataset": dataset, "action": action, "limit": limit, "before_id": before_id}
    )
    return Call("GET", "/v1/audit", _many(AuditEvent, "events"), params=params)


def raw(
    method: str,
    path: str,
    json: Any,
    params: Mapping[str, Any] | None,
    headers: Mapping[str, str] | None,
    delivery: Delivery,
) -> Call[Any]:
    return Call(
        method.upper(),
        path,
        _identity,
        json=json,
        params=params,
        headers=headers,
        delivery=delivery,
    )
