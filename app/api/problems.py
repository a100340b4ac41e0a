"""One place that renders every error as RFC 9457 ``application/problem+json``."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict
from sqlalchemy.exc import InterfaceError, OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match, Mount

from app.api.safe_text import scrub
from app.services.errors import PROBLEM_BASE, ProblemError

log = logging.getLogger("privacy_ledger.errors")

PROBLEM_JSON = "application/problem+json"

_TITLES = {
    400: "Bad request",
    401: "Missing or invalid API key",
    403: "Not allowed for this key",
    404: "Not found",
    405: "Method not allowed",
    409: "Conflict",
    413: "Request body too large",
    415: "Unsupported media type",
    422: "Invalid request",
    503: "Database unavailable",
    500: "Internal error",
}


_SLUGS = {413: "payload-too-large"}  # as the body-size middleware and PayloadTooLarge say


class Problem(BaseModel):
    """RFC 9457 problem details (extra members such as ``spent`` or ``errors`` may follow)."""

    model_config = ConfigDict(extra="allow")

    type: str
    title: str
    status: int
    detail: str


def _problem(description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {PROBLEM_JSON: {"schema": Problem.model_json_schema()}},
    }


PROBLEM_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: _problem("malformed request (e.g. body is not JSON)"),
    401: _problem("missing, unknown or revoked API key"),
    403: _problem("the key's role does not allow this"),
    404: _problem("no such resource (or not visible to a scoped key)"),
    409: _problem("conflict: over budget (with spent, budget, requested) or a state conflict"),
    413: _problem("request body too large"),
    422: _problem("invalid request: the detail names the bad value"),
    503: _problem("the database is unavailable; retry (with the same Idempotency-Key)"),
}
"""Error responses declared on every router (problem+json)."""


def problem_response(body: dict[str, Any], headers: dict[str, str] | None = None) -> JSONResponse:
    """The problem as a response; strings echoed from the request (a field name in ``loc``, an
    unknown id) are scrubbed of lone surrogates so that the answer always renders."""
    return JSONResponse(
        scrub(body), status_code=int(body["status"]), media_type=PROBLEM_JSON, headers=headers
    )


def _clean_errors(errors: Any) -> list[dict[str, Any]]:
    out = []
    for e in errors:
        loc = [str(p) for p in e.get("loc", ()) if p not in ("body",)]
        out.append({"loc": loc, "msg": str(e.get("msg", "")), "type": str(e.get("type", ""))})
    return out


_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def _allowed_methods(request: Request) -> list[str]:
    """Every method some route fully matches at this path (the routes of included routers are
    not listed one by one, so each method is asked for); static files: GET and HEAD."""
    # match from the application's root (inside a mount, root_path names the mount)
    scope = {**request.scope, "root_path": request.scope.get("app_root_path", "")}
    methods: set[str] = set()
    for route in request.app.routes:
        if isinstance(route, Mount):
            if route.matches(scope)[0] is not Match.NONE:
                methods |= {"GET", "HEAD"}
            continue
        for method in _METHODS:
            if route.matches({**scope, "method": method})[0] is Match.FULL:
                methods.add(method)
    return [m for m in _METHODS if m in methods]


def install(app: FastAPI) -> None:
    """Register the handlers. Unexpected exceptions are answered (500) and logged by
    ``observability.RequestContext``, which knows the request id."""

    @app.exception_handler(ProblemError)
    async def _problem(_request: Request, exc: ProblemError) -> JSONResponse:
        headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
        return problem_response(exc.to_problem(), headers)

    @app.exception_handler(RequestValidationError)
    async def _validation(_request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = _clean_errors(exc.errors())
        detail = (
            "; ".join(f"{'.'.join(e['loc']) or 'body'}: {e['msg']}" for e in errors[:5])
            or "invalid request"
        )
        body = {
            "type": PROBLEM_BASE + "validation-error",
            "title": "Invalid request",
            "status": 422,
            "detail": detail,
            "errors": errors,
        }
        return problem_response(body)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        status = exc.status_code
        detail = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
        if status == 400 and "parsing the body" in detail:
            detail = "the request body is not valid JSON (or nests too deeply)"
        slug = _SLUGS.get(status) or _TITLES.get(status, "error").lower().replace(" ", "-")
        body = {
            "type": PROBLEM_BASE + slug,
            "title": _TITLES.get(status, "Error"),
            "status": status,
            "detail": detail,
        }
        headers = dict(exc.headers) if exc.headers else {}
        if status == 405:
            headers["Allow"] = ", ".join(_allowed_methods(_request))
        return problem_response(body, headers or None)

    @app.exception_handler(OperationalError)
    @app.exception_handler(InterfaceError)
    async def _db_unavailable(request: Request, exc: Exception) -> JSONResponse:
        log.error(
            "database unavailable on %s %s: %s",
            request.method,
            request.url.path,
            getattr(exc, "orig", None) or type(exc).__name__,
        )
        body = {
            "type": PROBLEM_BASE + "database-unavailable",
            "title": "Database unavailable",
            "status": 503,
            "detail": (
                "the database did not answer; retry later (charges: with the same "
                "Idempotency-Key, so a charge that did commit is not recorded twice)"
            ),
        }
        return problem_response(body, {"Retry-After": "1"})


__all__ = ["PROBLEM_JSON", "PROBLEM_RESPONSES", "Problem", "install", "problem_response"]
