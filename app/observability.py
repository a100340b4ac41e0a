"""Metrics (Prometheus), structured JSON logs and request ids.

Metrics live in prometheus-client's default registry, created once per process. Counters
that describe a transaction's outcome (charges, reservations) are *deferred*: a service
records them on its session with :func:`count`, and the session's ``after_commit`` event
applies them (``after_rollback`` drops them), so a rolled-back transaction never moves a
counter. Database errors are counted by the engines' ``handle_error`` event (:func:`watch`).
With several worker processes set ``PROMETHEUS_MULTIPROC_DIR`` to an empty directory
(prometheus-client's multiprocess mode); ``/metrics`` then aggregates every worker.

Logs are one JSON object per line with ``ts``, ``level``, ``logger``, ``msg``, the current
``request_id`` and any ``extra=`` fields. API keys and database passwords are never logged:
request headers are not logged at all, and a last-line filter masks anything shaped like a
key or a URL password.
"""

from __future__ import annotations

import contextvars
import json
import logging
import os
import re
import sys
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector
from sqlalchemy import Engine, event
from sqlalchemy.engine import ExceptionContext
from sqlalchemy.orm import Session
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.asgi import send_problem

CHARGES = Counter(
    "privacy_ledger_charges",
    "Charges decided, by dataset id, mechanism kind and outcome (admitted or refused).",
    ["dataset", "mechanism", "outcome"],
)
RESERVATIONS = Counter(
    "privacy_ledger_reservations",
    "Reservation events by dataset id, mechanism kind and outcome "
    "(reserved, refused, committed, released, expired).",
    ["dataset", "mechanism", "outcome"],
)
STRUCTURE_REFUSALS = Counter(
    "privacy_ledger_structure_refusals",
    "Charges and reservations refused by a budget structure, by dataset id and the first limit "
    "hit (dataset: the budget or a block's; lifetime; allocation).",
    ["dataset", "limit"],
)
REQUEST_SECONDS = Histogram(
    "privacy_ledger_http_request_duration_seconds",
    "HTTP request latency by method, route template and status code.",
    ["method", "route", "status"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)
DB_ERRORS = Counter(
    "privacy_ledger_db_errors",
    "Database errors by statement kind (select, insert, update, ...) and exception class.",
    ["operation", "error"],
)

_PENDING = "privacy_ledger_metrics"


def count(session: Session, counter: Counter, **labels: str) -> None:
    """Increment ``counter`` once the session's transaction commits (never on rollback)."""
    session.info.setdefault(_PENDING, []).append((counter, labels))


@event.listens_for(Session, "after_commit")
def _apply_pending(session: Session) -> None:
    """Apply the increments recorded on ``session``: its transaction committed."""
    for counter, labels in session.info.pop(_PENDING, ()):
        counter.labels(**labels).inc()


@event.listens_for(Session, "after_rollback")
def _discard_pending(session: Session) -> None:
    session.info.pop(_PENDING, None)


def _count_db_error(context: ExceptionContext) -> None:
    statement = (context.statement or "").split(None, 1)
    operation = statement[0].lower() if statement else "connect"
    DB_ERRORS.labels(operation=operation, error=type(context.original_exception).__name__).inc()


def watch(*engines: Engine) -> None:
    """Count the database errors of ``engines`` (idempotent)."""
    for engine in engines:
        if not event.contains(engine, "handle_error", _count_db_error):
            event.listen(engine, "handle_error", _count_db_error)


def metrics_payload(extra: Sequence[Collector] = ()) -> tuple[bytes, str]:
    """The exposition text (every worker's, in multiprocess mode) and its content type;
    ``extra``: collectors computed at scrape time (e.g. from the database), appended."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        body = generate_latest(registry)
    else:
        body = generate_latest(REGISTRY)
    if extra:
        scraped = CollectorRegistry(auto_describe=False)
        for collector in extra:
            scraped.register(collector)
        body += generate_latest(scraped)
    return body, CONTENT_TYPE_LATEST


# --- request ids and logs -----------------------------------------------------------------

request_id_var: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "privacy_ledger_request_id", default=None
)
_SAFE_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:\-]{1,128}$")
# API keys are "pl_" + url-safe base64; URLs may carry "user:password@"
_SECRET_PATTERNS = (
    (re.compile(r"\bpl_[A-Za-z0-9_\-]{16,}"), "pl_***"),
    (re.compile(r"(?i)(bearer\s+)[^\s\"',]+"), r"\1***"),
    (re.compile(r"(://[^:/@\s]+:)[^@\s]+@"), r"\1***@"),
)
_RESERVED = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {
    "message",
    "asctime",
    "color_message",  # uvicorn's ANSI-coloured copy of msg
}


def scrub(text: str, secrets: Sequence[str] = ()) -> str:
    """Mask API keys, bearer tokens and URL passwords in ``text``, and each of ``secrets``
    (values of any shape, such as ``PRIVACY_LEDGER_ADMIN_KEY``; also as a JSON string
    escapes them)."""
    for secret in secrets:
        text = text.replace(secret, "***").replace(json.dumps(secret)[1:-1], "***")
    for pattern, repl in _SECRET_PATTERNS:
        text = pattern.sub(repl, text)
    return text


class _Masking:
    """A formatter's secrets of any shape, masked with the shaped ones (:func:`scrub`)."""

    secrets: tuple[str, ...] = ()

    def scrub(self, text: str) -> str:
        return scrub(text, self.secrets)


class JsonFormatter(_Masking, logging.Formatter):
    """One JSON object per record; secrets masked (see :func:`scrub`)."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat().replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        rid = getattr(record, "request_id", None) or request_id_var.get()
        if rid:
            out["request_id"] = rid
        for key, value in vars(record).items():
            if key not in _RESERVED and key not in out and not key.startswith("_"):
                out[key] = value
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return self.scrub(json.dumps(out, default=str, ensure_ascii=False))


class TextFormatter(_Masking, logging.Formatter):
    """Human-readable lines (``PRIVACY_LEDGER_LOG_JSON=false``), secrets masked too."""

    def format(self, record: logging.LogRecord) -> str:
        rid = request_id_var.get()
        base = super().format(record)
        return self.scrub(f"{base} [request_id={rid}]" if rid else base)


_HANDLER_FLAG = "_privacy_ledger_handler"


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is at emit time (test runners swap it)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, _value: Any) -> None:
        pass


def configure_logging(
    level: str = "INFO", json_logs: bool = True, secrets: Sequence[str] = ()
) -> None:
    """Send the ``privacy_ledger`` and ``uvicorn`` loggers, and every logger that propagates to
    the root (libraries), to stderr through our formatter, which masks ``secrets`` (the
    operator's admin key: it need not look like a generated key) besides the shaped ones.

    Idempotent: calling it again replaces our handler instead of adding another.
    """
    handler = _StderrHandler()
    formatter: JsonFormatter | TextFormatter = (
        JsonFormatter()
        if json_logs
        else TextFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    )
    formatter.secrets = tuple(x for x in secrets if x)
    handler.setFormatter(formatter)
    setattr(handler, _HANDLER_FLAG, True)
    for name in ("privacy_ledger", "uvicorn", "uvicorn.error"):
        logger = logging.getLogger(name)
        # uvicorn's own text handlers go (one format per process); others' handlers on our
        # logger (a test's capture, say) stay
        mine = name == "privacy_ledger"
        for old in [h for h in logger.handlers if not mine or getattr(h, _HANDLER_FLAG, False)]:
            logger.removeHandler(old)
        logger.addHandler(handler)
        logger.setLevel(level.upper())
        logger.propagate = False
    # every other logger (psycopg, SQLAlchemy, Alembic...) reaches the root's handlers: ours,
    # so that their records too are one JSON object per line with secrets masked (they went
    # to Python's last-resort handler, plain text and unmasked); their levels stay theirs
    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, _HANDLER_FLAG, False)]:
        root.removeHandler(old)
    root.addHandler(handler)
    # we write our own access line (with the request id); uvicorn's would duplicate it
    logging.getLogger("uvicorn.access").disabled = True


access_log = logging.getLogger("privacy_ledger.access")


class RequestContext:
    """ASGI middleware: a request id (the caller's ``X-Request-ID`` if well-formed, else a new
    one) echoed in the response, a latency histogram by route template, one access log line."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = None
        for name, value in scope.get("headers", ()):
            if name == b"x-request-id":
                candidate = value.decode("latin-1")
                if _SAFE_REQUEST_ID.match(candidate):
                    rid = candidate
                break
        rid = rid or uuid.uuid4().hex
        token = request_id_var.set(rid)
        status = 500
        started_response = False
        started = time.perf_counter()

        async def send_with_id(message: Message) -> None:
            nonlocal status, started_response
            if message["type"] == "http.response.start":
                started_response = True
                status = message["status"]
                headers = list(message.get("headers", ()))
                headers.append((b"x-request-id", rid.encode()))
                message = {**message, "headers": headers}
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        except Exception:
            # log here, while the request id is known; answer 500 if nothing was sent yet
            access_log.getChild("errors").exception(
                "unhandled error on %s %s", scope["method"], scope["path"]
            )
            if started_response:
                raise
            status = 500
            await send_problem(
                send_with_id,
                500,
                "internal",
                "Internal error",
                "an unexpected error occurred; it has been logged with this request's id",
            )
        finally:
            elapsed = time.perf_counter() - started
            route = scope.get("route")
            template = getattr(route, "path", None) or "unmatched"
            REQUEST_SECONDS.labels(scope["method"], template, str(status)).observe(elapsed)
            access_log.info(
                "%s %s %d",
                scope["method"],
                template,
                status,
                extra={
                    "method": scope["method"],
                    "path": scope["path"],
                    "route": template,
                    "status": status,
                    "duration_ms": round(elapsed * 1000, 3),
                    "client": (scope.get("client") or ("-",))[0],
                },
            )
            request_id_var.reset(token)


__all__ = [
    "CHARGES",
    "DB_ERRORS",
    "RESERVATIONS",
    "REQUEST_SECONDS",
    "STRUCTURE_REFUSALS",
    "JsonFormatter",
    "RequestContext",
    "configure_logging",
    "count",
    "metrics_payload",
    "request_id_var",
    "scrub",
    "watch",
]
