"""Dependencies as ``Annotated`` aliases: the database, the caller, and role checks."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.security.utils import get_authorization_scheme_param

from app.config import Settings
from app.db.engine import Database
from app.services.errors import Forbidden
from app.services.keys import Principal, authenticate, require_role

bearer = HTTPBearer(auto_error=False, description="An API key: `Authorization: Bearer <key>`")


async def get_db(request: Request) -> Database:
    db: Database = request.app.state.db
    return db


async def get_settings_dep(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


DbDep = Annotated[Database, Depends(get_db)]
SettingsDep = Annotated[Settings, Depends(get_settings_dep)]


def get_principal(
    request: Request,
    db: DbDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> Principal:
    principal = authenticate(db, credentials.credentials if credentials else None)
    request.state.key_id = principal.key_id
    return principal


async def _viewer(p: Annotated[Principal, Depends(get_principal)]) -> Principal:
    require_role(p, "viewer")
    return p


async def _pipeline(p: Annotated[Principal, Depends(get_principal)]) -> Principal:
    require_role(p, "pipeline")
    return p


async def _admin(p: Annotated[Principal, Depends(get_principal)]) -> Principal:
    require_role(p, "admin")
    return p


def metrics_access(request: Request, settings: SettingsDep, db: DbDep) -> None:
    """``/metrics`` is open unless ``PRIVACY_LEDGER_METRICS_KEY_REQUIRED``; then it needs an
    unscoped key of any role (the metrics name every dataset id). The header is read here,
    not declared, so that the OpenAPI document shows the default (open) endpoint."""
    if not settings.metrics_key_required:
        return
    scheme, key = get_authorization_scheme_param(request.headers.get("Authorization"))
    principal = authenticate(db, key if scheme.lower() == "bearer" else None)
    if principal.dataset_ids is not None:
        raise Forbidden("/metrics covers every dataset: it needs an unscoped key")


Viewer = Annotated[Principal, Depends(_viewer)]
Pipeline = Annotated[Principal, Depends(_pipeline)]
Admin = Annotated[Principal, Depends(_admin)]

__all__ = [
    "Admin",
    "DbDep",
    "Pipeline",
    "SettingsDep",
    "Viewer",
    "bearer",
    "get_db",
    "get_principal",
    "metrics_access",
]
