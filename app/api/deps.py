"""Dependencies as ``Annotated`` aliases: the database, the caller, and role checks."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from app.config import Settings
from app.db.engine import Database
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
]
