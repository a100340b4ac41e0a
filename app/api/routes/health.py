"""Liveness and readiness (no key needed)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse, Response
from sqlalchemy import inspect, text

from app import __version__, observability
from app.api.deps import DbDep, metrics_access
from app.db.migrate import behind_head
from app.services.metrics import DatasetCollector
from app.services.verification import formulas_behind

router = APIRouter(tags=["health"])


@router.get("/healthz", summary="Liveness")
def healthz() -> dict[str, Any]:
    return {"status": "ok", "version": __version__}


@router.get(
    "/readyz",
    summary="Readiness: the database answers and the schema is at this release's head",
    responses={
        503: {
            "description": (
                "not ready: the database does not answer, has no schema, or its schema is at "
                "an older revision, or its ledger's curves were derived under older curve "
                "formulas (run migrate)"
            ),
            "content": {
                "application/json": {
                    "schema": {
                        "type": "object",
                        "properties": {"status": {"type": "string"}, "detail": {"type": "string"}},
                        "required": ["status", "detail"],
                    }
                }
            },
        }
    },
)
def readyz(db: DbDep) -> JSONResponse:
    try:
        with db.read() as s:
            revision = None  # no schema at all (a database re-created empty): named below
            if inspect(s.connection()).has_table("alembic_version"):
                revision = s.execute(text("SELECT version_num FROM alembic_version")).scalar()
            if revision is not None:
                s.execute(text("SELECT 1 FROM dataset_total LIMIT 1"))
        behind = behind_head(revision)
        if behind is None and revision is not None:
            behind = formulas_behind(db)
    except Exception as exc:  # any database failure means not ready
        return JSONResponse(
            {"status": "unavailable", "detail": type(exc).__name__}, status_code=503
        )
    if behind is not None:  # every other request would fail on the missing columns
        return JSONResponse({"status": "unavailable", "detail": behind}, status_code=503)
    return JSONResponse({"status": "ready", "database": "sqlite" if db.is_sqlite else "postgresql"})


@router.get(
    "/metrics",
    summary="Prometheus metrics (text exposition format; a key only if the server requires one)",
    response_class=Response,
    dependencies=[Depends(metrics_access)],
    responses={
        200: {
            "description": "Prometheus text exposition format 0.0.4",
            "content": {"text/plain": {"schema": {"type": "string"}}},
        }
    },
)
def metrics(db: DbDep) -> Response:
    body, content_type = observability.metrics_payload([DatasetCollector(db)])
    return Response(body, media_type=content_type)
