"""The direct path: plain requests to the hot routes skip FastAPI's general request solving.

FastAPI solves every request's parameters through a general machine: per parameter it looks
up aliases, asks whether the annotation is a sequence, a form or a JSON field, parses the
``Content-Type`` with ``email.message``, and walks the nested dependencies (the role's bearer,
the app's safe-text check). For a charge that is a fifth of the server's CPU.

``DirectRoute`` is FastAPI's documented extension point for this (a custom ``APIRoute``
whose ``get_route_handler`` wraps the stock one). A request on the direct path is one whose
parameters need none of that machine:

* no query string (every query parameter takes its default);
* a bearer key in ``Authorization`` (the role's dependency would pass it on as it is);
* path parameters that the app's ``reject_unsafe_parameters`` lets through;
* each declared header given at most once, validated by the route's own field for it;
* for a route with a body: ``Content-Type: application/json``, a JSON document that the
  route's own body field validates.

Those values are what FastAPI would have passed, and the endpoint is called with them in the
thread pool, as FastAPI calls a sync endpoint. Any other request, and any request that one of
these checks refuses, goes to the stock handler (the body read once is cached on the request),
so every error answer is FastAPI's own, byte for byte: the direct path decides nothing about
an invalid request. ``tests/api/test_direct_route.py`` sends the same requests, valid and
invalid, to an app with and one without the direct path and compares the answers.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Coroutine
from copy import deepcopy
from dataclasses import dataclass
from typing import Any

from fastapi import params
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from fastapi.security.utils import get_authorization_scheme_param
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from app.api.deps import role_of
from app.api.safe_text import unsafe_reason
from app.principal import Credentials, Role

ENABLED = True
"""Off only in the test that compares the two paths' answers (read on each request)."""

_MISSING = object()


@dataclass(frozen=True)
class _Plan:
    """What a route's direct path reads, found once from its dependant."""

    call: Callable[..., Any]
    role: Role
    role_param: str
    request_param: str | None
    path_params: tuple[str, ...]
    defaults: tuple[tuple[str, Any], ...]  # query parameters: their defaults
    headers: tuple[tuple[str, str, Any], ...]  # (parameter, lower-case header name, field)
    body: Any  # the body's ModelField, or None

    @classmethod
    def of(cls, route: APIRoute) -> _Plan | None:
        """The plan for ``route``, or None when its parameters need FastAPI's general path."""
        d: Dependant = route.dependant
        if (
            d.call is None
            or d.cookie_params
            or len(d.body_params) > 1
            or route._embed_body_fields
            or d.websocket_param_name
            or d.http_connection_param_name
            or d.response_param_name
            or d.background_tasks_param_name
            or d.security_scopes_param_name
            or len(d.dependencies) != 1
            or any(f.field_info.annotation is not str for f in d.path_params)
        ):
            return None
        role = role_of(d.dependencies[0])
        if role is None or d.dependencies[0].name is None:
            return None
        defaults = []
        for f in d.query_params:
            if f.field_info.is_required() or f.field_info.validate_default:
                return None
            defaults.append((f.name, f.default))
        headers = []
        for f in d.header_params:
            alias = f.field_info.alias
            if alias is None or f.field_info.is_required() or f.field_info.validate_default:
                return None
            headers.append((f.name, alias.lower(), f))
        body = d.body_params[0] if d.body_params else None
        if body is not None and (
            not isinstance(body.field_info, params.Body) or isinstance(body.field_info, params.Form)
        ):
            return None
        return cls(
            call=d.call,
            role=role,
            role_param=d.dependencies[0].name,
            request_param=d.request_param_name,
            path_params=tuple(f.name for f in d.path_params),
            defaults=tuple(defaults),
            headers=tuple(headers),
            body=body,
        )

    async def arguments(self, request: Request) -> dict[str, Any] | None:
        """The endpoint's arguments for ``request``, or None: the stock handler must answer."""
        scope = request.scope
        if scope.get("query_string"):
            return None
        values: dict[str, Any] = {}
        for name in self.path_params:
            value = request.path_params.get(name)
            if not isinstance(value, str) or unsafe_reason(value) is not None:
                return None
            values[name] = value
        wanted = {h: None for _, h, _ in self.headers}
        authorization: Any = _MISSING
        content_type: Any = _MISSING
        for raw_name, raw_value in scope["headers"]:
            name = raw_name.decode("latin-1").lower()
            if name == "authorization":
                if authorization is _MISSING:
                    authorization = raw_value.decode("latin-1")
            elif name == "content-type":
                if content_type is _MISSING:
                    content_type = raw_value.decode("latin-1")
            elif name in wanted:
                if wanted[name] is not None:
                    return None  # repeated: FastAPI's path (and the route) decide
                wanted[name] = raw_value.decode("latin-1")
        scheme, token = get_authorization_scheme_param(
            authorization if authorization is not _MISSING else None
        )
        if scheme.lower() != "bearer" or not token:
            return None
        values[self.role_param] = Credentials(token=token, role=self.role)
        for name, default in self.defaults:
            values[name] = deepcopy(default)
        for name, header, field in self.headers:
            raw = wanted[header]
            if raw is None:
                values[name] = deepcopy(field.default)
                continue
            value, errors = field.validate(raw, values, loc=("header", field.field_info.alias))
            if errors:
                return None
            values[name] = value
        if self.body is not None:
            if content_type is _MISSING or content_type.split(";", 1)[0].strip().lower() != (
                "application/json"
            ):
                return None
            raw_body = await request.body()
            if not raw_body:
                return None
            try:  # any failure (RecursionError on deep nesting, say) is the stock path's
                document = json.loads(raw_body)
                value, errors = self.body.validate(document, values, loc=("body",))
            except Exception:  # noqa: BLE001 - nothing was done yet: FastAPI's path answers
                return None
            if errors:
                return None
            values[self.body.name] = value
        if self.request_param is not None:
            values[self.request_param] = request
        return values


class DirectRoute(APIRoute):
    """An ``APIRoute`` whose plain requests (see the module) skip FastAPI's solving."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        stock = super().get_route_handler()
        plan = _Plan.of(self)
        if plan is None or not _is_sync(plan.call) or not _answers_response(plan.call):
            return stock

        async def handler(request: Request) -> Response:
            values = await plan.arguments(request) if ENABLED else None
            if values is None:
                return await stock(request)
            answer: Response = await run_in_threadpool(plan.call, **values)
            return answer

        return handler


def _is_sync(call: Callable[..., Any]) -> bool:
    return not inspect.iscoroutinefunction(call)


def _answers_response(call: Callable[..., Any]) -> bool:
    """Whether ``call`` is declared to return a ``Response`` (the routes that ``send()``)."""
    returns = inspect.signature(call).return_annotation
    return returns is Response or returns == "Response"


__all__ = ["ENABLED", "DirectRoute"]
