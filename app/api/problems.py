"""One place that renders every error as RFC 9457 ``application/problem+json``, and the
per-route declaration of the problems a route can answer with (``responses(...)``)."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict
from sqlalchemy.exc import IntegrityError, InterfaceError, OperationalError, ProgrammingError
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match, Mount

from app import errors
from app.api.deps import refused_credentials
from app.api.safe_text import scrub
from app.errors import ProblemError, problem_body

log = logging.getLogger("privacy_ledger.errors")

PROBLEM_JSON = "application/problem+json"


_SLUGS = {413: "payload-too-large"}  # as the body-size middleware and PayloadTooLarge say


class Problem(BaseModel):
    """RFC 9457 problem details (extra members such as ``spent`` or ``errors`` may follow)."""

    model_config = ConfigDict(extra="allow")

    type: str
    title: str
    status: int
    detail: str


class BudgetProblem(Problem):
    """409 over budget: the spend now, the budget, what was asked and what it would spend."""

    dataset_id: str
    spent: dict[str, Any]
    budget: dict[str, Any]
    requested: dict[str, Any] | None = None
    would_spend: dict[str, Any] | None = None
    dry_run: bool = False
    # which limit refused ("dataset" on a dataset without budget structures); budget structures
    # (docs/budgets.md): the blocks over their budget, the allocation's budget and spend, a
    # partitioned dataset's lifetime budget
    limit: str | None = None
    limits: list[str] | None = None
    blocks: dict[str, str] | None = None
    blocks_exceeded: list[str] | None = None
    allocation_blocks_exceeded: list[str] | None = None
    allocation: dict[str, Any] | None = None
    lifetime_budget: dict[str, Any] | None = None


_BY_STATUS: dict[int, type[ProblemError]] = {
    cls.status: cls
    for cls in (
        errors.BadRequest,
        errors.Unauthorized,
        errors.Forbidden,
        errors.NotFound,
        errors.Conflict,
        errors.PayloadTooLarge,
        errors.Unprocessable,
        errors.DatabaseUnavailable,
    )
}
_ALWAYS = (400, 401, 403, 413, 422, 503)


def responses(*statuses: int, budget: bool = False) -> dict[int | str, dict[str, Any]]:
    """The ``responses=`` of a route: the problems it can answer with (plus those every
    authenticated route can: 400, 401, 403, 413, 422, 503). ``budget``: 409 is BudgetExceeded."""
    out: dict[int | str, dict[str, Any]] = {}
    for status in sorted({*statuses, *_ALWAYS}):
        cls = _BY_STATUS[status]
        schema: dict[str, Any] = Problem.model_json_schema()
        description = cls.description
        if status == 503:  # the database, or too many unknown keys being checked at once
            description = f"{description}; or {errors.ServerBusy.description}"
        if status == 409 and budget:
            # over budget (spent, budget, ...), or the dataset is archived (a plain problem)
            schema = {"anyOf": [BudgetProblem.model_json_schema(), schema]}
            description = (
                f"{errors.BudgetExceeded.description}; or {errors.DatasetArchived.description}"
            )
        out[status] = {
            "description": description,
            "content": {PROBLEM_JSON: {"schema": schema}},
        }
    return out


def problem_response(body: dict[str, Any], headers: dict[str, str] | None = None) -> JSONResponse:
    """The problem as a response; strings echoed from the request (a field name in ``loc``, an
    unknown id) are scrubbed of lone surrogates and non-finite numbers are null, so that the
    answer always renders."""
    return JSONResponse(
        scrub(errors.json_finite(body)),
        status_code=int(body["status"]),
        media_type=PROBLEM_JSON,
        headers=headers,
    )


def _clean_errors(errs: Any) -> list[dict[str, Any]]:
    out = []
    for e in errs:
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
        if exc.status == 503:
            headers = {"Retry-After": "1"}
        return problem_response(exc.to_problem(), headers)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        # the key first: 401 / 403 before any word about the body (a database read, in a
        # worker thread as every key check; only on this error path)
        refused = await run_in_threadpool(refused_credentials, request)
        if refused is not None:
            return await _problem(request, refused)
        errs = _clean_errors(exc.errors())
        detail = (
            "; ".join(f"{'.'.join(e['loc']) or 'body'}: {e['msg']}" for e in errs[:5])
            or "invalid request"
        )
        return problem_response(problem_body(422, detail, slug="validation-error", errors=errs))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        status = exc.status_code
        detail = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
        if status == 400 and "parsing the body" in detail:
            detail = "the request body is not valid JSON (or nests too deeply)"
        headers = dict(exc.headers) if exc.headers else {}
        if status == 405:
            headers["Allow"] = ", ".join(_allowed_methods(request))
        return problem_response(
            problem_body(status, detail, slug=_SLUGS.get(status)), headers or None
        )

    @app.exception_handler(OperationalError)
    @app.exception_handler(InterfaceError)
    @app.exception_handler(ProgrammingError)
    async def _db_unavailable(request: Request, exc: Exception) -> JSONResponse:
        schema = _schema_missing(exc)
        if isinstance(exc, ProgrammingError) and not schema:
            raise exc  # a fault of ours: 500, logged with the request id
        log.error(
            "database unavailable on %s %s: %s",
            request.method,
            request.url.path,
            getattr(exc, "orig", None) or type(exc).__name__,
        )
        problem = errors.DatabaseUnavailable(
            "the database has no schema, or an older one than this release: an operator must "
            "run 'privacy-ledger migrate'"
            if schema
            else "the database did not answer; retry later (charges: with the same "
            "Idempotency-Key, so a charge that did commit is not recorded twice)"
        )
        return problem_response(problem.to_problem(), {"Retry-After": "1"})

    @app.exception_handler(IntegrityError)
    async def _seq_clash(request: Request, exc: Exception) -> JSONResponse:
        if not _ledger_seq_clash(exc):
            raise exc  # a fault of ours: 500, logged with the request id
        log.error(
            "ledger position clash on %s %s (totals behind the ledger): %s",
            request.method,
            request.url.path,
            getattr(exc, "orig", None),
        )
        problem = errors.TotalsDrifted(
            "this dataset's stored entry count is behind its ledger, so a new entry's position "
            "clashed with an existing one; nothing was recorded. An operator must run "
            "'privacy-ledger verify --rebuild'"
        )
        return problem_response(problem.to_problem())


def _ledger_seq_clash(exc: Exception) -> bool:
    """Whether ``exc`` is a ledger entry's position (dataset, seq) clashing with a stored one:
    only a totals row whose entry count lags its ledger (edited by hand) makes it."""
    text = str(getattr(exc, "orig", exc))
    return (
        "uq_ledger_entry_dataset_seq" in text or "ledger_entry.dataset_id, ledger_entry.seq" in text
    )


_UNDEFINED = {"42P01", "42703"}
"""PostgreSQL SQLSTATEs of a missing table or column."""


def _schema_missing(exc: Exception) -> bool:
    """Whether ``exc`` says a table or column is missing: a database re-created empty, or not
    migrated (PostgreSQL's undefined table or column, SQLite's 'no such table/column')."""
    orig = getattr(exc, "orig", None)
    if getattr(orig, "sqlstate", None) in _UNDEFINED:
        return True
    return str(orig).startswith(("no such table", "no such column"))


__all__ = ["PROBLEM_JSON", "BudgetProblem", "Problem", "install", "problem_response", "responses"]
