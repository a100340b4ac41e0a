"""Dependencies as ``Annotated`` aliases: the database, settings, and the caller's credentials.

The role aliases (``Viewer``, ``Pipeline``, ``Admin``) only read the ``Authorization`` header
(401 when it is missing); the key itself is checked by the service inside its own transaction,
in the same worker thread as the work (one thread hop per request).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.dependencies.models import Dependant
from fastapi.requests import HTTPConnection
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.security.utils import get_authorization_scheme_param

from app.config import Settings
from app.db.engine import Database
from app.errors import Forbidden, ProblemError, Unauthorized
from app.principal import Credentials, Role
from app.services.auth import authenticated

bearer = HTTPBearer(auto_error=False, description="An API key: `Authorization: Bearer <key>`")


def db_of(request: Request) -> Database:
    """The application's database. The hot routes (charge, budget) call it themselves rather
    than declaring ``DbDep``: one nested dependency fewer for FastAPI to solve per request."""
    db: Database = request.app.state.db
    return db


async def get_db(request: Request) -> Database:
    return db_of(request)


async def get_settings_dep(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


DbDep = Annotated[Database, Depends(get_db)]
SettingsDep = Annotated[Settings, Depends(get_settings_dep)]
BearerDep = Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]


class _RoleBearer(HTTPBearer):
    """The bearer scheme of one role: ``HTTPBearer`` (the OpenAPI document shows the same
    ``HTTPBearer`` scheme on every route) whose answer is the caller's ``Credentials``, or 401
    when there is no key. One dependency per request instead of two nested ones (the role's
    over ``bearer``): FastAPI's dependency solving is a fifth of a charge's CPU."""

    def __init__(self, role: Role) -> None:
        super().__init__(
            auto_error=False, scheme_name="HTTPBearer", description=bearer.model.description
        )
        self.role = role

    async def __call__(self, request: HTTPConnection) -> Credentials:  # type: ignore[override]
        presented = await super().__call__(request)
        if presented is None or not presented.credentials:
            raise Unauthorized("an API key is required: send 'Authorization: Bearer <key>'")
        return Credentials(token=presented.credentials, role=self.role)


Viewer = Annotated[Credentials, Depends(_RoleBearer(Role.VIEWER))]
Pipeline = Annotated[Credentials, Depends(_RoleBearer(Role.PIPELINE))]
Admin = Annotated[Credentials, Depends(_RoleBearer(Role.ADMIN))]


def role_of(dependant: Dependant) -> Role | None:
    """The role ``dependant`` asks for when it is a ``Viewer`` / ``Pipeline`` / ``Admin``
    dependency (None for any other)."""
    return dependant.call.role if isinstance(dependant.call, _RoleBearer) else None


def route_role(route: object) -> Role | None:
    """The role a route's ``Viewer`` / ``Pipeline`` / ``Admin`` dependency asks for (None when
    the route takes no key)."""
    dependant = getattr(route, "dependant", None)
    stack = list(dependant.dependencies) if dependant is not None else []
    while stack:
        dep = stack.pop()
        if (role := role_of(dep)) is not None:
            return role
        stack.extend(dep.dependencies)
    return None


def refused_credentials(request: Request) -> ProblemError | None:
    """Why the request's key may not call its route (401 unknown or revoked key, 403 role too
    low), or None. The role aliases only read the header, so a request whose body or query is
    invalid meets FastAPI's 422 before the service checks its key; the 422 handler asks this
    first, so that a caller without a valid key learns nothing about the request's shape."""
    role = route_role(request.scope.get("route"))
    scheme, key = get_authorization_scheme_param(request.headers.get("Authorization"))
    if role is None or scheme.lower() != "bearer" or not key:
        return None  # no key needed, or none sent (the role alias answered 401 for that)
    try:
        authenticated(db_of(request), Credentials(key, role))
    except ProblemError as exc:
        return exc
    return None


def metrics_access(request: Request, settings: SettingsDep, db: DbDep) -> None:
    """``/metrics`` is open unless ``PRIVACY_LEDGER_METRICS_KEY_REQUIRED``; then it needs an
    unscoped key of any role (the metrics name every dataset id). The header is read here,
    not declared, so that the OpenAPI document shows the default (open) endpoint."""
    if not settings.metrics_key_required:
        return
    scheme, key = get_authorization_scheme_param(request.headers.get("Authorization"))
    principal = authenticated(
        db, Credentials(key if scheme.lower() == "bearer" else None, Role.VIEWER)
    )
    if principal.dataset_ids is not None:
        raise Forbidden("/metrics covers every dataset: it needs an unscoped key")


__all__ = [
    "Admin",
    "BearerDep",
    "DbDep",
    "Pipeline",
    "SettingsDep",
    "Viewer",
    "bearer",
    "db_of",
    "get_db",
    "get_settings_dep",
    "metrics_access",
    "refused_credentials",
    "role_of",
    "route_role",
]
