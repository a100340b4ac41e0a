"""``POST /v1/accounting/compose``: stateless what-if composition."""

from __future__ import annotations

from fastapi import APIRouter, Response

from app import responses as r
from app.api.answer import send
from app.api.deps import DbDep, Viewer
from app.api.problems import responses
from app.api.schemas import ComposeIn
from app.services.compose import compose

router = APIRouter(prefix="/v1/accounting", tags=["accounting"])


@router.post(
    "/compose",
    response_model=r.Composition,
    responses=responses(),
    summary="Compose a fixed list of mechanisms (non-adaptive)",
)
def compose_route(body: ComposeIn, db: DbDep, caller: Viewer) -> Response:
    mechanisms = [m.core for m in body.mechanisms]
    return send(compose(db, caller, mechanisms, body.delta, body.accounting))
