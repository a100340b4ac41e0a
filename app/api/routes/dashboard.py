"""Read models for dashboards: spend over time, curves, a dataset's rejections (viewer+)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from app.api.deps import DbDep, Viewer
from app.api.problems import PROBLEM_RESPONSES
from app.services import dashboard, ledger

router = APIRouter(prefix="/v1/datasets", tags=["dashboard"], responses=PROBLEM_RESPONSES)


@router.get(
    "/{dataset_id}/series",
    summary="Spend (epsilon at the budget delta) after each ledger entry, downsampled",
)
def series(
    dataset_id: str,
    db: DbDep,
    p: Viewer,
    points: Annotated[int, Query(ge=2, le=dashboard.MAX_SERIES_POINTS)] = 500,
) -> dict[str, Any]:
    return dashboard.series(db, p, dataset_id, points)


@router.get(
    "/{dataset_id}/curves",
    summary="Composed RDP curve against the budget's curve, and the (epsilon, delta) trade-off",
)
def curves(dataset_id: str, db: DbDep, p: Viewer) -> dict[str, Any]:
    return dashboard.curves(db, p, dataset_id)


@router.get("/{dataset_id}/rejections", summary="This dataset's refused requests, newest first")
def rejections(
    dataset_id: str,
    db: DbDep,
    p: Viewer,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    cursor: Annotated[str | None, Query(max_length=200)] = None,
) -> dict[str, Any]:
    return ledger.list_rejections(db, p, dataset=dataset_id, limit=limit, cursor=cursor)
