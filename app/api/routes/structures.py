"""Budget structures (issue 15): allocations of a dataset and blocks of a partitioned one."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response, status

from app import responses as r
from app.api.answer import send
from app.api.deps import Admin, DbDep, Viewer
from app.api.problems import responses
from app.api.schemas import AllocationIn, AllocationPatch
from app.services import allocations, partitions

router = APIRouter(prefix="/v1/datasets", tags=["budget structures"])

BlockKey = Annotated[str, Query(min_length=1, max_length=16, description="block key (UTC)")]


@router.post(
    "/{dataset_id}/allocations",
    status_code=status.HTTP_201_CREATED,
    response_model=r.Allocation,
    responses=responses(404, 409),
    summary="Create an allocation (a sub-budget; admin, audited)",
)
def create_allocation(dataset_id: str, body: AllocationIn, db: DbDep, caller: Admin) -> Response:
    answer = allocations.create_allocation(
        db,
        caller,
        dataset_id,
        name=body.name,
        epsilon=body.budget.epsilon,
        delta=body.budget.delta,
        entry_delta_budget=body.entry_delta_budget,
    )
    return send(answer, status.HTTP_201_CREATED)


@router.get(
    "/{dataset_id}/allocations",
    response_model=r.AllocationList,
    responses=responses(404),
    summary="A dataset's allocations with their spend",
)
def list_allocations(dataset_id: str, db: DbDep, caller: Viewer) -> Response:
    return send(allocations.list_allocations(db, caller, dataset_id))


@router.get(
    "/{dataset_id}/allocations/{name}",
    response_model=r.Allocation,
    responses=responses(404),
    summary="One allocation with its spend",
)
def get_allocation(dataset_id: str, name: str, db: DbDep, caller: Viewer) -> Response:
    return send(allocations.get_allocation(db, caller, dataset_id, name))


@router.patch(
    "/{dataset_id}/allocations/{name}",
    response_model=r.Allocation,
    responses=responses(404),
    summary="Change an allocation's budget (admin, audited)",
)
def patch_allocation(
    dataset_id: str, name: str, body: AllocationPatch, db: DbDep, caller: Admin
) -> Response:
    changes = body.budget.model_dump(exclude_unset=True)  # the schema refuses null
    return send(allocations.update_allocation(db, caller, dataset_id, name, changes))


@router.get(
    "/{dataset_id}/blocks",
    response_model=r.BlockList,
    responses=responses(404),
    summary="Blocks of a partitioned dataset: spent, remaining, exhausted (O(blocks returned))",
)
def list_blocks(
    dataset_id: str,
    db: DbDep,
    caller: Viewer,
    from_: Annotated[str, Query(alias="from", min_length=1, max_length=16)],
    to: BlockKey,
    allocation: Annotated[str | None, Query(max_length=200)] = None,
) -> Response:
    return send(partitions.list_blocks(db, caller, dataset_id, from_, to, allocation))
