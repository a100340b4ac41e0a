"""Admin: keys, rejections, audit trail, totals verification."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query, status

from app.api.deps import Admin, DbDep
from app.api.problems import PROBLEM_RESPONSES
from app.api.schemas import KeyIn
from app.db.models import MAX_BIGINT
from app.services import audit, keys, ledger

router = APIRouter(tags=["admin"], responses=PROBLEM_RESPONSES)


@router.post("/v1/keys", status_code=status.HTTP_201_CREATED, summary="Create a key (shown once)")
def create_key(body: KeyIn, db: DbDep, p: Admin) -> dict[str, Any]:
    return keys.create_key(db, p, body.role, body.datasets, body.label)


@router.get("/v1/keys", summary="List keys (never the secrets)")
def list_keys(db: DbDep, p: Admin) -> dict[str, Any]:
    return {"keys": keys.list_keys(db, p)}


@router.delete("/v1/keys/{key_id}", summary="Revoke a key")
def revoke_key(key_id: str, db: DbDep, p: Admin) -> dict[str, Any]:
    return keys.revoke_key(db, p, key_id)


@router.get("/v1/rejections", summary="Refused charges and reservations, newest first")
def rejections(
    db: DbDep,
    p: Admin,
    dataset: Annotated[str | None, Query(max_length=200)] = None,
    dataset_id: Annotated[str | None, Query(max_length=200)] = None,
    since: datetime | None = None,
    until: datetime | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    cursor: Annotated[str | None, Query(max_length=200)] = None,
) -> dict[str, Any]:
    return ledger.list_rejections(
        db, p, dataset=dataset or dataset_id, since=since, until=until, limit=limit, cursor=cursor
    )


@router.get("/v1/audit", summary="Audit trail, newest first")
def audit_trail(
    db: DbDep,
    p: Admin,
    dataset: Annotated[str | None, Query(max_length=200)] = None,
    action: Annotated[str | None, Query(max_length=64)] = None,
    since: datetime | None = None,
    until: datetime | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    before_id: Annotated[int | None, Query(ge=1, le=MAX_BIGINT)] = None,
) -> dict[str, Any]:
    events = audit.list_events(
        db,
        p,
        dataset_id=dataset,
        action=action,
        since=since,
        until=until,
        limit=limit,
        before_id=before_id,
    )
    return {"events": events}


@router.post("/v1/admin/verify", summary="Recompute totals from the ledger; rebuild on request")
def verify(db: DbDep, p: Admin, rebuild: bool = False) -> dict[str, Any]:
    return ledger.verify(db, rebuild=rebuild, principal=p)
