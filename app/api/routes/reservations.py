"""Reservations: hold budget, then commit or release."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response, status

from app import responses as r
from app.api.answer import send
from app.api.deps import DbDep, Pipeline, SettingsDep, Viewer
from app.api.problems import responses
from app.api.safe_text import IdempotencyKey, no_dry_run, one_idempotency_key
from app.api.schemas import ReservationIn
from app.services import reservations

router = APIRouter(tags=["reservations"])


@router.post(
    "/v1/datasets/{dataset_id}/reservations",
    status_code=status.HTTP_201_CREATED,
    response_model=r.ReservationAnswer,
    responses=responses(404, 409, budget=True),
    summary="Hold budget for a planned invocation (409 when it does not fit)",
)
def reserve(
    dataset_id: str,
    body: ReservationIn,
    request: Request,
    db: DbDep,
    caller: Pipeline,
    settings: SettingsDep,
    idempotency_key: IdempotencyKey = None,
) -> Response:
    one_idempotency_key(request)
    no_dry_run(
        request,
        "POST /v1/datasets/{id}/charges?dry_run=true answers whether it fits without recording",
    )
    answer = reservations.reserve(
        db,
        caller,
        dataset_id,
        mechanism=body.mechanism.core,
        wire=body.mechanism.wire(),
        ttl_seconds=body.ttl_seconds,
        label=body.label,
        metadata=body.metadata,
        max_ttl_seconds=settings.reservation_max_ttl_seconds,
        idempotency_key=idempotency_key,
        allocation=body.allocation,
        blocks=body.blocks.span() if body.blocks is not None else None,
    )
    return send(answer, status.HTTP_201_CREATED)


@router.get(
    "/v1/datasets/{dataset_id}/reservations",
    response_model=r.ReservationList,
    responses=responses(404),
    summary="A dataset's reservations (default: the active holds), soonest expiry first",
)
def list_(
    dataset_id: str,
    db: DbDep,
    caller: Viewer,
    status: Annotated[
        str, Query(description="active (default), committed, released, expired or all")
    ] = "active",
    limit: Annotated[int, Query(ge=1, le=1000)] = 1000,
) -> Response:
    which = None if status == "all" else status
    return send(reservations.list_reservations(db, caller, dataset_id, which, limit))


@router.get(
    "/v1/reservations/{reservation_id}",
    response_model=r.Reservation,
    responses=responses(404),
    summary="A reservation and its status",
)
def get(reservation_id: str, db: DbDep, caller: Viewer) -> Response:
    return send(reservations.get_reservation(db, caller, reservation_id))


@router.post(
    "/v1/reservations/{reservation_id}/commit",
    response_model=r.ReservationAnswer,
    responses=responses(404, 409),
    summary="Commit into the ledger",
)
def commit(reservation_id: str, request: Request, db: DbDep, caller: Pipeline) -> Response:
    no_dry_run(request, "GET /v1/reservations/{id} shows the hold without committing it")
    return send(reservations.commit(db, caller, reservation_id))


@router.delete(
    "/v1/reservations/{reservation_id}",
    response_model=r.ReservationAnswer,
    responses=responses(404, 409),
    summary="Release (no output was released)",
)
def release(reservation_id: str, request: Request, db: DbDep, caller: Pipeline) -> Response:
    no_dry_run(request, "GET /v1/reservations/{id} shows the hold without releasing it")
    return send(reservations.release(db, caller, reservation_id))
