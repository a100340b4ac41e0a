"""``POST /v1/accounting/compose``: stateless what-if composition."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from app.api.deps import Viewer
from app.api.problems import PROBLEM_RESPONSES
from app.api.schemas import ComposeIn
from app.services.compose import compose

router = APIRouter(prefix="/v1/accounting", tags=["accounting"], responses=PROBLEM_RESPONSES)


@router.post("/compose", summary="Compose a fixed list of mechanisms (non-adaptive)")
def compose_route(body: ComposeIn, _p: Viewer) -> dict[str, Any]:
    return compose([m.core for m in body.mechanisms], body.delta, body.accounting)
