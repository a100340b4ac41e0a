"""Datasets, charges, ledger, budget, spend and calibration."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Response, status

from app.api.deps import Admin, DbDep, Pipeline, SettingsDep, Viewer
from app.api.problems import PROBLEM_RESPONSES
from app.api.safe_text import IdempotencyKey
from app.api.schemas import ChargeIn, DatasetIn, DatasetPatch, SampleRate
from app.db.models import MAX_BIGINT
from app.services import calibrate as calibrate_service
from app.services import charges, datasets, ledger

router = APIRouter(prefix="/v1/datasets", tags=["datasets"], responses=PROBLEM_RESPONSES)

KindQuery = Annotated[
    Literal[
        "gaussian",
        "laplace",
        "randomized_response",
        "rappor",
        "subsampled_gaussian",
        "discrete_laplace",
    ],
    Query(description="Mechanism kind to calibrate."),
]
IdemKey = IdempotencyKey


@router.post("", status_code=status.HTTP_201_CREATED, summary="Create a dataset (admin)")
def create(body: DatasetIn, db: DbDep, p: Admin) -> dict[str, Any]:
    return datasets.create_dataset(
        db,
        p,
        name=body.name,
        budget_epsilon=body.budget.epsilon,
        budget_delta=body.budget.delta,
        accounting=body.accounting,
        adaptive=body.adaptive,
        allowed_mechanisms=list(body.allowed_mechanisms) if body.allowed_mechanisms else None,
        description=body.description,
    )


@router.get("", summary="List datasets with their current spend")
def list_(
    db: DbDep,
    p: Viewer,
    limit: Annotated[int, Query(ge=1, le=1000)] = 1000,
    offset: Annotated[int, Query(ge=0, le=MAX_BIGINT)] = 0,
) -> dict[str, Any]:
    return datasets.list_datasets(db, p, limit=limit, offset=offset)


@router.get("/{dataset_id}", summary="One dataset with its current spend")
def get(dataset_id: str, db: DbDep, p: Viewer) -> dict[str, Any]:
    return datasets.get_dataset(db, p, dataset_id)


@router.patch("/{dataset_id}", summary="Change budget or description (admin, audited)")
def patch(dataset_id: str, body: DatasetPatch, db: DbDep, p: Admin) -> dict[str, Any]:
    changes = body.model_dump(exclude_unset=True)
    # null means "no change" for fields that cannot be null; description and
    # allowed_mechanisms (null = every kind) can be set to null
    changes = {
        k: v
        for k, v in changes.items()
        if v is not None or k in ("description", "allowed_mechanisms")
    }
    if "budget" in changes:
        changes["budget"] = {k: v for k, v in changes["budget"].items() if v is not None}
    return datasets.update_dataset(db, p, dataset_id, changes)


@router.post(
    "/{dataset_id}/charges",
    status_code=status.HTTP_201_CREATED,
    summary="Charge a mechanism invocation (409 when over budget; ?dry_run=true records nothing)",
    responses={200: {"description": "dry run: the charge would be admitted (nothing recorded)"}},
)
def charge(
    dataset_id: str,
    body: ChargeIn,
    db: DbDep,
    p: Pipeline,
    response: Response,
    idempotency_key: IdemKey = None,
    dry_run: bool = False,
) -> dict[str, Any]:
    code, answer = charges.charge(
        db,
        p,
        dataset_id,
        mechanism=body.mechanism.core,
        mechanism_json=body.mechanism.wire(),
        label=body.label,
        metadata=body.metadata,
        idempotency_key=idempotency_key,
        dry_run=dry_run,
    )
    response.status_code = code
    return answer


@router.get("/{dataset_id}/ledger", summary="Ledger entries, newest first (cursor-paginated)")
def ledger_(
    dataset_id: str,
    db: DbDep,
    p: Viewer,
    settings: SettingsDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    cursor: Annotated[str | None, Query(max_length=200)] = None,
) -> dict[str, Any]:
    return ledger.list_entries(
        db, p, dataset_id, limit=min(limit, settings.max_page_size), cursor=cursor
    )


@router.get("/{dataset_id}/budget", summary="Budget, spent, remaining (O(1) in ledger length)")
def budget(dataset_id: str, db: DbDep, p: Viewer) -> dict[str, Any]:
    return datasets.budget_view(db, p, dataset_id)


@router.get("/{dataset_id}/spend", summary="Epsilon at another delta, or delta at an epsilon")
def spend(
    dataset_id: str,
    db: DbDep,
    p: Viewer,
    delta: Annotated[float | None, Query(gt=0, lt=1, allow_inf_nan=False)] = None,
    epsilon: Annotated[float | None, Query(ge=0, allow_inf_nan=False)] = None,
) -> dict[str, Any]:
    return datasets.spend_query(db, p, dataset_id, delta, epsilon)


@router.get(
    "/{dataset_id}/calibrate",
    summary="Least noise (or largest epsilon / most steps) a next invocation may use and fit",
)
def calibrate(
    dataset_id: str,
    db: DbDep,
    p: Viewer,
    mechanism: KindQuery,
    parameter: Annotated[str | None, Query(max_length=32)] = None,
    sensitivity: Annotated[float | None, Query(gt=0, allow_inf_nan=False)] = None,
    sample_rate: Annotated[SampleRate | None, Query()] = None,
    steps: Annotated[int | None, Query(ge=1)] = None,
    sigma: Annotated[float | None, Query(gt=0, allow_inf_nan=False)] = None,
    k: Annotated[int | None, Query(ge=2)] = None,
    count: Annotated[int | None, Query(ge=1)] = None,
) -> dict[str, Any]:
    fixed = {
        "sensitivity": sensitivity,
        "sample_rate": sample_rate,
        "steps": steps,
        "sigma": sigma,
        "k": k,
        "count": count,
    }
    return calibrate_service.calibrate_next(
        db, p, dataset_id, mechanism, parameter, {k_: v for k_, v in fixed.items() if v is not None}
    )
