"""The ASGI application: ``app.main:app``, built by ``create_app(settings)``."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from datetime import datetime, timedelta

from fastapi import Depends, FastAPI
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app import __version__, api_docs, observability
from app.accounting import pld_mechanisms
from app.api import problems
from app.api.routes import (
    accounting,
    admin,
    dashboard,
    datasets,
    health,
    mechanisms,
    reservations,
    structures,
    web,
)
from app.api.safe_text import reject_unsafe_parameters
from app.asgi import send_problem
from app.config import Settings, get_settings, settings_or_exit
from app.db import migrate
from app.db.engine import Database
from app.db.models import utcnow
from app.services import idempotency, keys, verification
from app.services import reservations as reservation_service

log = logging.getLogger("privacy_ledger")

SWEEP_INTERVAL_SECONDS = 1.0
"""The sweeper looks for due holds at least this often (every replica's sweeper sees every
hold). A hold shorter-lived than this cannot be missed: the TTL is at least 1 s."""
SWEEP_AT_EXPIRY = True
"""Sleep only until the earliest active hold's expiry when that comes sooner: a hold is charged
within moments of falling due, and reads (``/budget``, the ledger, the hold itself) show it
charged without waiting for a write on the dataset."""


class BodySizeLimit:
    """Refuse request bodies above ``max_bytes`` with 413 (declared or streamed size)."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    too_big = int(value) > self.max_bytes
                except ValueError:
                    too_big = True
                if too_big:
                    await self._reject(send)
                    return
        received = 0

        async def limited() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise _TooLarge(self.max_bytes)
            return message

        try:
            await self.app(scope, limited, send)
        except _TooLarge:  # raised where no exception handler runs (e.g. before routing)
            await self._reject(send)

    async def _reject(self, send: Send) -> None:
        await send_problem(
            send,
            413,
            "payload-too-large",
            "Request body too large",
            f"request bodies are limited to {self.max_bytes} bytes",
        )


SERVICE_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})
"""The unauthenticated paths outside ``/v1/`` that a trailing slash also reaches."""


class TrailingSlash:
    """``/v1/datasets/`` is ``/v1/datasets`` (and ``/healthz/`` is ``/healthz``): API and
    service paths are routed without their trailing slashes, where the router answered a 307
    redirect with no body (which an HTTP client that does not follow redirects took as the
    answer)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if (
            scope["type"] == "http"
            and path.endswith("/")
            and (path.startswith("/v1/") or path.rstrip("/") in SERVICE_PATHS)
        ):
            scope = {**scope, "path": path.rstrip("/")}
            raw = scope.get("raw_path")
            if isinstance(raw, bytes):
                scope["raw_path"] = raw.rstrip(b"/")
        await self.app(scope, receive, send)


class _TooLarge(HTTPException):
    """A streamed (chunked) body passed the limit. An HTTPException, so that FastAPI's body
    reader lets it through (it turns any other error into 400 "not valid JSON") and the
    problem handler answers 413."""

    def __init__(self, max_bytes: int) -> None:
        super().__init__(413, f"request bodies are limited to {max_bytes} bytes")


def _bootstrap_keys(db: Database, settings: Settings) -> None:
    if settings.admin_key:
        keys.ensure_admin_key(db, settings.admin_key)
        return
    key = keys.bootstrap_first_key(db)
    if key is None:
        log.info(
            "API keys exist (a first admin key is printed once, at the first start); a lost "
            "admin key is replaced with `privacy-ledger keys create --role admin --local`"
        )
    else:
        banner = (
            "\n" + "=" * 72 + "\n"
            "privacy-ledger: no API key existed, so an admin key was created.\n"
            "It is shown once and stored only as a slow salted digest (scrypt):\n\n"
            f"    {key}\n\n"
            "Use it as 'Authorization: Bearer <key>' (or PRIVACY_LEDGER_API_KEY for the CLI).\n"
            + "=" * 72
            + "\n"
        )
        print(banner, flush=True)


async def _sweeper(db: Database, stop: asyncio.Event, retention: timedelta | None = None) -> None:
    """Charge the due holds, waking every ``SWEEP_INTERVAL_SECONDS`` or at the earliest active
    hold's expiry if sooner (``SWEEP_AT_EXPIRY``), until ``stop`` is set; a sweep in progress
    then finishes first. With a ``retention``, also delete the Idempotency-Key records older
    than it, at start and every ``PRUNE_INTERVAL_SECONDS`` (``idempotency.prune``).

    Stopped, never cancelled: a cancelled ``run_in_threadpool`` returns at once but leaves its
    thread running, and the sweep then handed its connection back to a pool that
    ``Database.dispose`` had already closed, where it stayed open (never closed: psycopg's
    "connection deleted while still open" when it was collected)."""

    async def next_due() -> datetime | None:
        return (
            await run_in_threadpool(reservation_service.next_expiry, db)
            if SWEEP_AT_EXPIRY
            else None
        )

    async def prune() -> None:
        assert retention is not None
        try:
            deleted = await run_in_threadpool(idempotency.prune, db, utcnow() - retention)
        except Exception:  # tried again at the next interval; the error is logged
            log.exception("idempotency records could not be pruned")
            return
        if deleted:
            log.info("pruned %d idempotency records older than %s", deleted, retention)

    next_prune = time.monotonic()
    try:
        due = await next_due()
    except Exception:  # keep sweeping; the error is logged
        log.exception("reservation sweeper failed")
        due = None
    while True:
        if retention is not None and time.monotonic() >= next_prune:
            await prune()
            next_prune = time.monotonic() + PRUNE_INTERVAL_SECONDS
        delay = SWEEP_INTERVAL_SECONDS
        if due is not None:
            delay = min(delay, max(0.0, (due - utcnow()).total_seconds()) + SWEEP_MARGIN)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), delay)
        if stop.is_set():
            return
        try:  # one log line per failed round (the database down: once a second)
            await run_in_threadpool(reservation_service.sweep_expired, db)
            due = await next_due()
        except Exception:  # keep sweeping; the error is logged
            log.exception("reservation sweeper failed")
            due = None


SWEEP_MARGIN = 0.005
"""Seconds past an expiry the sweeper wakes (the hold is then due by the clock it reads)."""

PRUNE_INTERVAL_SECONDS = 3600.0
"""How often each replica deletes the Idempotency-Key records past their retention."""


ROUTERS = (
    datasets.router,
    health.router,
    accounting.router,
    mechanisms.router,
    dashboard.router,
    reservations.router,
    structures.router,
    admin.router,
    web.router,
)
"""Every API router, the hot paths (charges, budget reads) first: FastAPI matches a request
against the routers in this order, and no two routers' paths overlap, so the order changes only
the work per request (and the order of paths in the OpenAPI document)."""


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the application for ``settings`` (default: from the environment)."""
    settings = settings or get_settings()
    observability.configure_logging(
        settings.log_level, settings.log_json, secrets=[settings.admin_key or ""]
    )
    pld_mechanisms.set_cache_limit(settings.pld_cache_mb * 2**20)  # per process

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if settings.auto_migrate:
            await run_in_threadpool(migrate.upgrade, settings.database_url)
        db = Database(settings.database_url)
        observability.watch(db.write_engine, db.read_engine)
        app.state.db = db
        await run_in_threadpool(_bootstrap_keys, db, settings)
        if settings.auto_migrate:  # curves stored under formulas since corrected
            try:
                await run_in_threadpool(verification.rederive_if_formulas_changed, db)
            except Exception:  # the server still serves; the repair is tried at the next start
                log.exception(
                    "stored curves could not be re-derived under this release's formulas; run "
                    "`privacy-ledger verify --rebuild` (or `privacy-ledger migrate`) to see why"
                )
        else:  # the migration job re-derives them; /readyz says so until it has run
            with contextlib.suppress(Exception):  # (a database not ready is /readyz's to say)
                await run_in_threadpool(verification.stamp_if_empty, db)
                behind = await run_in_threadpool(verification.formulas_behind, db)
                if behind is not None:
                    log.warning("not ready: %s", behind)
        stop = asyncio.Event()
        retention = (
            timedelta(days=settings.idempotency_retention_days)
            if settings.idempotency_retention_days is not None
            else None
        )
        task = asyncio.create_task(_sweeper(db, stop, retention))
        try:
            yield
        finally:
            stop.set()
            try:
                await task  # the sweep in progress returns its connections before the dispose
            finally:
                db.dispose()

    app = FastAPI(
        title="privacy-ledger",
        version=__version__,
        description=(
            "A stateful privacy-budget accountant: pipelines charge differentially private "
            "mechanism invocations to per-dataset ledgers; the service composes them (zCDP or "
            "RDP) and refuses, atomically, any charge that would exceed the budget."
        ),
        lifespan=lifespan,
        docs_url=None,  # /docs and /redoc come from api_docs: no CDN, they work offline
        redoc_url=None,
        dependencies=[Depends(reject_unsafe_parameters)],
    )
    api_docs.install(app)
    app.state.settings = settings
    problems.install(app)
    for r in ROUTERS:
        app.include_router(r)
    app.mount("/static", web.static_files(), name="static")
    app.add_middleware(TrailingSlash)
    app.add_middleware(BodySizeLimit, max_bytes=settings.max_body_bytes)
    app.add_middleware(observability.RequestContext)  # outermost: ids and latency for all
    return app


app = create_app(settings_or_exit())

__all__ = ["ROUTERS", "app", "create_app"]
