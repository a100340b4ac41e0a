"""Read models for dashboards: spend over time, curves, a dataset's rejections (viewer+)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response

from app import responses as r
from app.api.answer import send
from app.api.deps import DbDep, Viewer
from app.api.problems import responses
from app.api.query_times import QueryTime
from app.services import dashboard, ledger

router = APIRouter(prefix="/v1/datasets", tags=["dashboard"])


@router.get(
    "/{dataset_id}/series",
    response_model=r.Series,
    responses=responses(404),
    summary="Spend (epsilon at the budget delta) after each ledger entry, downsampled",
)
def series(
    dataset_id: str,
    db: DbDep,
    caller: Viewer,
    points: Annotated[int, Query(ge=2, le=dashboard.MAX_SERIES_POINTS)] = 500,
) -> Response:
    return send(dashboard.series(db, caller, dataset_id, points))


@router.get(
    "/{dataset_id}/curves",
    response_model=r.Curves,
    responses=responses(404),
    summary="Composed RDP curve against the budget's curve, and the (epsilon, delta) trade-off",
)
def curves(dataset_id: str, db: DbDep, caller: Viewer) -> Response:
    return send(dashboard.curves(db, caller, dataset_id))


@router.get(
    "/{dataset_id}/rejections",
    response_model=r.RejectionPage,
    responses=responses(404),
    summary="This dataset's refused requests, newest first",
)
def rejections(
    dataset_id: str,
    db: DbDep,
    caller: Viewer,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    cursor: Annotated[str | None, Query(max_length=200)] = None,
    label: Annotated[str | None, Query(max_length=200)] = None,
    kind: Annotated[str | None, Query(max_length=32, description="mechanism kind")] = None,
    created_after: QueryTime | None = None,
    created_before: QueryTime | None = None,
) -> Response:
    page = ledger.list_rejections(
        db,
        caller,
        dataset=dataset_id,
        limit=limit,
        cursor=cursor,
        label=label,
        kind=kind,
        since=created_after,
        until=created_before,
    )
    return send(page)
