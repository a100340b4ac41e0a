"""Admin: keys, rejections, audit trail, totals verification."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response, status

from app import responses as r
from app.api.answer import send
from app.api.deps import Admin, DbDep
from app.api.problems import responses
from app.api.query_times import QueryTime
from app.api.schemas import KeyIn
from app.db.models import MAX_BIGINT
from app.principal import Role
from app.services import audit, keys, ledger, verification

router = APIRouter(tags=["admin"])


@router.post(
    "/v1/keys",
    status_code=status.HTTP_201_CREATED,
    response_model=r.KeyCreated,
    responses=responses(409),  # a scoped admin's label that reads as a key's outside its scope
    summary="Create a key (shown once)",
)
def create_key(body: KeyIn, db: DbDep, caller: Admin) -> Response:
    created = keys.create_key(
        db, caller, Role(body.role), body.datasets, body.label, allocations=body.allocations
    )
    return send(created, status.HTTP_201_CREATED)


@router.get(
    "/v1/keys",
    response_model=r.KeyList,
    responses=responses(),
    summary="List keys (never the secrets)",
)
def list_keys(db: DbDep, caller: Admin) -> Response:
    return send(keys.list_keys(db, caller))


@router.delete(
    "/v1/keys/{key_id}",
    response_model=r.Key,
    responses=responses(404),
    summary="Revoke a key",
)
def revoke_key(key_id: str, db: DbDep, caller: Admin) -> Response:
    return send(keys.revoke_key(db, caller, key_id))


@router.get(
    "/v1/rejections",
    response_model=r.RejectionPage,
    responses=responses(404),
    summary="Refused charges and reservations, newest first",
)
def rejections(
    db: DbDep,
    caller: Admin,
    dataset: Annotated[str | None, Query(max_length=200)] = None,
    dataset_id: Annotated[str | None, Query(max_length=200)] = None,
    since: QueryTime | None = None,
    until: QueryTime | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    cursor: Annotated[str | None, Query(max_length=200)] = None,
    kind: Annotated[str | None, Query(max_length=32, description="mechanism kind")] = None,
) -> Response:
    page = ledger.list_rejections(
        db,
        caller,
        dataset=dataset or dataset_id,
        since=since,
        until=until,
        limit=limit,
        cursor=cursor,
        kind=kind,
    )
    return send(page)


@router.get(
    "/v1/audit",
    response_model=r.AuditPage,
    responses=responses(),
    summary="Audit trail, newest first",
)
def audit_trail(
    db: DbDep,
    caller: Admin,
    dataset: Annotated[str | None, Query(max_length=200)] = None,
    action: Annotated[str | None, Query(max_length=64)] = None,
    since: QueryTime | None = None,
    until: QueryTime | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    before_id: Annotated[int | None, Query(ge=1, le=MAX_BIGINT)] = None,
) -> Response:
    page = audit.list_events(
        db,
        caller,
        dataset_id=dataset,
        action=action,
        since=since,
        until=until,
        limit=limit,
        before_id=before_id,
    )
    return send(page)


@router.post(
    "/v1/admin/verify",
    response_model=r.VerifyReport,
    responses=responses(),
    summary="Recompute totals from the ledger; rebuild on request",
)
def verify(db: DbDep, caller: Admin, rebuild: bool = False) -> Response:
    return send(verification.verify(db, caller, rebuild=rebuild))
