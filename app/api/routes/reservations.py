"""Reservations: hold budget, then commit or release."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, status

from app.api.deps import DbDep, Pipeline, SettingsDep, Viewer
from app.api.problems import PROBLEM_RESPONSES
from app.api.safe_text import IdempotencyKey
from app.api.schemas import ReservationIn
from app.services import reservations

router = APIRouter(tags=["reservations"], responses=PROBLEM_RESPONSES)


@router.post(
    "/v1/datasets/{dataset_id}/reservations",
    status_code=status.HTTP_201_CREATED,
    summary="Hold budget for a planned invocation (409 when it does not fit)",
)
def reserve(
    dataset_id: str,
    body: ReservationIn,
    db: DbDep,
    p: Pipeline,
    settings: SettingsDep,
    idempotency_key: IdempotencyKey = None,
) -> dict[str, Any]:
    return reservations.reserve(
        db,
        p,
        dataset_id,
        mechanism=body.mechanism.core,
        mechanism_json=body.mechanism.wire(),
        ttl_seconds=body.ttl_seconds,
        label=body.label,
        metadata=body.metadata,
        max_ttl_seconds=settings.reservation_max_ttl_seconds,
        idempotency_key=idempotency_key,
    )


@router.get("/v1/reservations/{reservation_id}", summary="A reservation and its status")
def get(reservation_id: str, db: DbDep, p: Viewer) -> dict[str, Any]:
    return reservations.get_reservation(db, p, reservation_id)


@router.post("/v1/reservations/{reservation_id}/commit", summary="Commit into the ledger")
def commit(reservation_id: str, db: DbDep, p: Pipeline) -> dict[str, Any]:
    return reservations.commit(db, p, reservation_id)


@router.delete("/v1/reservations/{reservation_id}", summary="Release (no output was released)")
def release(reservation_id: str, db: DbDep, p: Pipeline) -> dict[str, Any]:
    return reservations.release(db, p, reservation_id)
