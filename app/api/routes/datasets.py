"""Datasets, charges, ledger, budget, spend and calibration."""

from __future__ import annotations

import inspect
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request, Response, status
from fastapi.responses import StreamingResponse
from pydantic import AfterValidator

from app import responses as r
from app.accounting.filters import MAX_BUDGET_EPSILON, MIN_BUDGET_DELTA
from app.api.answer import send
from app.api.calibrate_query import KindQuery, late_fields, query_names, with_fixed_fields
from app.api.dataset_names import NAME_MAX_LENGTH
from app.api.deps import Admin, DbDep, Pipeline, SettingsDep, Viewer, db_of
from app.api.direct import DirectRoute
from app.api.problems import responses
from app.api.query_times import QueryTime
from app.api.safe_text import IdempotencyKey, one_dry_run, one_idempotency_key
from app.api.schemas import (
    DELTA_FLOOR_WHY,
    ChargeIn,
    DatasetIn,
    DatasetPatch,
    DpEventChargeIn,
    zero_or_at_least,
)
from app.db.models import MAX_BIGINT
from app.errors import Unprocessable
from app.services import calibrate as calibrate_service
from app.services import charges, datasets, ledger

router = APIRouter(prefix="/v1/datasets", tags=["datasets"], route_class=DirectRoute)

IdemKey = IdempotencyKey
_CHARGE_RESPONSES: dict[int | str, dict[str, Any]] = {  # both charge routes (200: dry run)
    200: {"model": r.DryRun, "description": "dry run: it would be admitted (nothing recorded)"},
    **responses(404, 409, budget=True),
}


# The hot paths first: FastAPI tries a router's routes in order, twice per request (to pick
# the router, then the route), and no two paths here overlap, so the order changes only the
# work per request (about 25 us of CPU for a budget read; and the order of the OpenAPI paths).


@router.post(
    "/{dataset_id}/charges",
    status_code=status.HTTP_201_CREATED,
    response_model=r.Charge,
    summary="Charge a mechanism invocation (409 when over budget; ?dry_run=true records nothing)",
    responses=_CHARGE_RESPONSES,
)
def charge(
    dataset_id: str,
    body: ChargeIn,
    request: Request,
    caller: Pipeline,
    idempotency_key: IdemKey = None,
    dry_run: bool = False,
) -> Response:
    one_idempotency_key(request)
    one_dry_run(request)
    answer = charges.charge(
        db_of(request),
        caller,
        dataset_id,
        mechanism=body.mechanism.core,
        wire=body.mechanism.wire(),
        label=body.label,
        metadata=body.metadata,
        idempotency_key=idempotency_key,
        dry_run=dry_run,
        allocation=body.allocation,
        blocks=body.blocks.span() if body.blocks is not None else None,
    )
    return send(answer, status.HTTP_200_OK if dry_run else status.HTTP_201_CREATED)


@router.get(
    "/{dataset_id}/budget",
    response_model=r.BudgetView,
    responses=responses(404),
    summary="Budget, spent, remaining (O(1) in ledger length)",
)
def budget(dataset_id: str, request: Request, caller: Viewer) -> Response:
    return send(datasets.budget_view(db_of(request), caller, dataset_id))


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=r.Dataset,
    responses=responses(409),
    summary="Create a dataset (admin)",
)
def create(body: DatasetIn, db: DbDep, caller: Admin) -> Response:
    answer = datasets.create_dataset(
        db,
        caller,
        name=body.name,
        budget_epsilon=body.budget.epsilon,
        budget_delta=body.budget.delta,
        accounting=body.accounting,
        adaptive=body.adaptive,
        allowed_mechanisms=list(body.allowed_mechanisms) if body.allowed_mechanisms else None,
        description=body.description,
        partition_unit=body.partition.unit if body.partition is not None else None,
        lifetime_budget=(
            (body.lifetime_budget.epsilon, body.lifetime_budget.delta)
            if body.lifetime_budget is not None
            else None
        ),
        entry_delta_budget=body.entry_delta_budget,
        lifetime_entry_delta_budget=body.lifetime_entry_delta_budget,
    )
    return send(answer, status.HTTP_201_CREATED)


@router.get(
    "",
    response_model=r.DatasetList,
    responses=responses(),
    summary="List datasets with their current spend",
)
def list_(
    db: DbDep,
    caller: Viewer,
    limit: Annotated[int, Query(ge=1, le=1000)] = 1000,
    offset: Annotated[int, Query(ge=0, le=MAX_BIGINT)] = 0,
    archived: Annotated[
        Literal["false", "true", "all"],
        Query(description="false (default): active only; true: archived only; all: both"),
    ] = "false",
    include_archived: Annotated[bool, Query(description="same as archived=all")] = False,
) -> Response:
    which = "all" if include_archived else archived
    return send(datasets.list_datasets(db, caller, limit=limit, offset=offset, archived=which))


@router.get(
    "/{dataset_id}",
    response_model=r.Dataset,
    responses=responses(404),
    summary="One dataset with its current spend",
)
def get(dataset_id: str, db: DbDep, caller: Viewer) -> Response:
    return send(datasets.get_dataset(db, caller, dataset_id))


@router.patch(
    "/{dataset_id}",
    response_model=r.Dataset,
    responses=responses(404, 409),
    summary="Change budget or description (admin, audited)",
)
def patch(dataset_id: str, body: DatasetPatch, db: DbDep, caller: Admin) -> Response:
    # the members given (budgets: their members given); null only where a field may be null
    # (description, allowed_mechanisms): the schema refuses it elsewhere
    changes = body.model_dump(exclude_unset=True)
    return send(datasets.update_dataset(db, caller, dataset_id, changes))


@router.post(
    "/{dataset_id}/archive",
    response_model=r.Dataset,
    responses=responses(404),
    summary="Archive: refuse new charges and reservations, hide from the listing (admin, audited)",
)
def archive(dataset_id: str, db: DbDep, caller: Admin) -> Response:
    return send(datasets.set_archived(db, caller, dataset_id, archived=True))


@router.post(
    "/{dataset_id}/unarchive",
    response_model=r.Dataset,
    responses=responses(404),
    summary="Unarchive: take charges again, listed by default (admin, audited)",
)
def unarchive(dataset_id: str, db: DbDep, caller: Admin) -> Response:
    return send(datasets.set_archived(db, caller, dataset_id, archived=False))


@router.post(
    "/{dataset_id}/charges/dp_event",
    status_code=status.HTTP_201_CREATED,
    response_model=r.ChargeBatch,
    summary="Charge a dp_accounting DpEvent: its mechanisms, all or none (one entry each)",
    responses=_CHARGE_RESPONSES,
)
def charge_dp_event(
    dataset_id: str,
    body: DpEventChargeIn,
    request: Request,
    db: DbDep,
    caller: Pipeline,
    idempotency_key: IdemKey = None,
    dry_run: bool = False,
) -> Response:
    one_idempotency_key(request)
    one_dry_run(request)
    answer = charges.charge_dp_event(
        db,
        caller,
        dataset_id,
        event=body.dp_event,
        label=body.label,
        metadata=body.metadata,
        idempotency_key=idempotency_key,
        dry_run=dry_run,
    )
    return send(answer, status.HTTP_200_OK if dry_run else status.HTTP_201_CREATED)


@router.get(
    "/{dataset_id}/ledger",
    response_model=r.LedgerPage,
    responses={
        200: {
            "description": "a page of entries (JSON), or the whole ledger as CSV / JSON Lines",
            "content": {
                "text/csv": {"schema": {"type": "string"}},
                "application/x-ndjson": {"schema": {"type": "string"}},
            },
        },
        **responses(404),
    },
    summary="Ledger entries, newest first (cursor-paginated, filtered); ?format=csv|jsonl exports",
)
def ledger_(
    dataset_id: str,
    db: DbDep,
    caller: Viewer,
    settings: SettingsDep,
    limit: Annotated[
        int | None, Query(ge=1, le=1000, description="JSON pages only (422 with an export)")
    ] = None,
    cursor: Annotated[
        str | None,
        Query(max_length=200, description="JSON pages only (422 with an export)"),
    ] = None,
    kind: Annotated[str | None, Query(max_length=32, description="mechanism kind")] = None,
    label: Annotated[str | None, Query(max_length=200)] = None,
    key: Annotated[str | None, Query(max_length=200, description="key id or label")] = None,
    key_id: Annotated[str | None, Query(max_length=200, description="same as key")] = None,
    created_after: QueryTime | None = None,
    created_before: QueryTime | None = None,
    allocation: Annotated[
        str | None,
        Query(max_length=NAME_MAX_LENGTH, description="the allocation charged (name or id)"),
    ] = None,
    block: Annotated[
        str | None,
        Query(
            max_length=16,
            description="partitioned datasets: entries whose block range covers this block",
        ),
    ] = None,
    format: Annotated[
        Literal["json", "csv", "jsonl"],
        Query(
            description="csv or jsonl: the whole (filtered) ledger, oldest first, streamed; "
            "it takes the filters, never limit or cursor"
        ),
    ] = "json",
) -> Response:
    if format != "json":
        given = [name for name, v in (("limit", limit), ("cursor", cursor)) if v is not None]
        if given:
            raise Unprocessable(
                f"{' and '.join(given)} {'page' if len(given) > 1 else 'pages'} the JSON "
                f"ledger only: format={format} exports "
                "every entry the filters keep (kind, label, key, created_after, "
                "created_before, allocation, block), oldest first, in one stream"
            )
    filters = ledger.EntryFilter(
        kind=kind,
        label=label,
        key=key if key is not None else key_id,
        created_after=created_after,
        created_before=created_before,
        allocation=allocation,
        block=block,
    )
    if format != "json":
        lines = ledger.export_entries(db, caller, dataset_id, format, filters)
        media = "text/csv; charset=utf-8" if format == "csv" else "application/x-ndjson"
        disposition = f'attachment; filename="ledger-{dataset_id[:40]}.{format}"'
        return StreamingResponse(
            lines, media_type=media, headers={"Content-Disposition": disposition}
        )
    page = ledger.list_entries(
        db,
        caller,
        dataset_id,
        limit=min(limit or settings.default_page_size, settings.max_page_size),
        cursor=cursor,
        filters=filters,
    )
    return send(page)


@router.get(
    "/{dataset_id}/spend",
    response_model=r.SpendQuery,
    responses=responses(404),
    summary="Epsilon at another delta, or delta at an epsilon",
)
def spend(
    dataset_id: str,
    db: DbDep,
    caller: Viewer,
    delta: Annotated[
        float | None,
        Query(
            ge=0,
            lt=1,
            allow_inf_nan=False,
            description=(
                "0 (the pure-DP sum: null when an entry has no pure bound), or at least the "
                "smallest budget delta (2^-1022)"
            ),
        ),
        AfterValidator(zero_or_at_least(MIN_BUDGET_DELTA, DELTA_FLOOR_WHY)),
    ] = None,
    epsilon: Annotated[
        float | None,
        Query(
            ge=0,
            le=MAX_BUDGET_EPSILON,
            allow_inf_nan=False,
            description="at most the largest budget epsilon",
        ),
    ] = None,
) -> Response:
    return send(datasets.spend_query(db, caller, dataset_id, delta, epsilon))


@router.get(
    "/{dataset_id}/calibrate",
    response_model=r.Calibration,
    responses=responses(404, 409),
    summary="Least noise (or largest epsilon / most steps) a next invocation may use and fit",
)
@with_fixed_fields(after="parameter")
def calibrate(
    dataset_id: str,
    request: Request,
    db: DbDep,
    caller: Viewer,
    mechanism: KindQuery,
    parameter: Annotated[str | None, Query(max_length=32)] = None,
    allocation: Annotated[
        str | None,
        Query(
            min_length=1,
            max_length=NAME_MAX_LENGTH,
            description="Calibrate against this allocation's budget too (as a charge to it).",
        ),
    ] = None,
    block_from: Annotated[
        str | None,
        Query(
            min_length=1,
            max_length=16,
            description="Partitioned datasets (required there): the first block the next "
            "invocation reads (e.g. 2026-11-23, 2026-W48, 2026-11); with block_to.",
        ),
    ] = None,
    block_to: Annotated[
        str | None,
        Query(min_length=1, max_length=16, description="The last block read (inclusive)."),
    ] = None,
    **fields: Any,
) -> Response:
    """The other parameters of the invocation are fixed by the query: each field of the
    mechanism object has a query parameter of its name (`sensitivity`, `sample_rate`, `steps`,
    `k`, `count`, `delta`, ...; the kinds' fields, from the registry). Nothing given is
    ignored: the parameter solved for, a parameter the kind does not have, one of another
    form of the mechanism object (a Laplace calibrated by `epsilon` takes no `sensitivity`:
    `parameter=scale` answers with it) and any query parameter not listed here are a 422
    naming it."""
    if (block_from is None) != (block_to is None):
        raise Unprocessable("give both block_from and block_to (an inclusive range), or neither")
    fixed = {n: v for n, v in fields.items() if v is not None} | late_fields(request)
    answer = calibrate_service.calibrate_next(
        db,
        caller,
        dataset_id,
        mechanism,
        parameter,
        fixed,
        allocation=allocation,
        blocks=(block_from, block_to) if block_from is not None and block_to is not None else None,
        unread=sorted(set(request.query_params) - _CALIBRATE_QUERY - query_names()),
    )
    return send(answer)


_CALIBRATE_QUERY = frozenset(inspect.signature(calibrate).parameters) - {
    "dataset_id",
    "request",
    "db",
    "caller",
}
"""The query parameters ``calibrate`` reads (any other is refused, not dropped); with the
fields of kinds registered after import (``query_names``)."""
