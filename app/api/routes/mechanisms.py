"""``GET /v1/mechanisms``: the mechanism kinds the service accepts, from the registry."""

from __future__ import annotations

from fastapi import APIRouter, Response

from app import responses as r
from app.api.answer import send
from app.api.deps import DbDep, Viewer
from app.api.problems import responses
from app.services import mechanisms

router = APIRouter(prefix="/v1/mechanisms", tags=["accounting"])


@router.get(
    "",
    response_model=r.MechanismCatalogue,
    responses=responses(),
    summary="Every mechanism kind: fields, description, neighbours, calibration, PLD support",
)
def list_mechanisms(db: DbDep, caller: Viewer) -> Response:
    return send(mechanisms.list_mechanisms(db, caller))
