"""Exceptions: one class per kind of failure, each carrying the problem+json fields."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx

from privacy_ledger_client._models import Budget, Requested, Spent, parse_or_none


class LedgerError(Exception):
    """Base class: an answer or failure from the ledger.

    ``status`` is the HTTP status (0 when no answer arrived), ``problem`` the RFC 9457 body as
    received (``type``, ``title``, ``detail`` and any extra fields the server added).
    """

    def __init__(self, status: int, problem: Mapping[str, Any]) -> None:
        self.status = status
        self.problem: dict[str, Any] = dict(problem)
        self.type = str(problem.get("type", ""))
        self.title = str(problem.get("title", ""))
        self.detail = str(problem.get("detail", ""))
        super().__init__(f"{status} {self.title}: {self.detail}" if status else self.detail)


class TransportError(LedgerError):
    """The server could not be reached, or the connection broke, after every retry. ``detail``
    is httpx's reason; the message also names the server's URL (``problem["url"]``) and where
    it came from."""

    def __init__(self, status: int, problem: Mapping[str, Any]) -> None:
        super().__init__(status, problem)
        url = self.problem.get("url")
        if url:
            self.args = (
                f"cannot reach the server at {url}: {self.detail} (the url given to the client, "
                "else PRIVACY_LEDGER_URL, else the default http://127.0.0.1:8000)",
            )


class DecodingError(LedgerError):
    """The server answered with a body this client cannot read (not JSON, or a field missing)."""


class HTTPStatusError(LedgerError):
    """The server answered with an error status (the subclasses name the common ones)."""


class InvalidRequest(HTTPStatusError):
    """400, 413 or 422: the request was refused as malformed; ``detail`` says why."""


class Unauthorized(HTTPStatusError):
    """401: no key, an unknown key or a revoked key."""


class Forbidden(HTTPStatusError):
    """403: the key's role or dataset scope does not allow this."""


class NotFound(HTTPStatusError):
    """404: no such dataset, reservation or key (or not visible to this key)."""


class Conflict(HTTPStatusError):
    """409: the request conflicts with the current state (a name taken, a released hold)."""


class BudgetExceeded(Conflict):
    """409: admitting this would exceed the budget; nothing was charged.

    ``spent`` is the spend before the request, ``budget`` the dataset's budget, ``requested`` the
    mechanism with its cost alone, ``would_spend`` the spend had it been admitted.
    """

    def __init__(self, status: int, problem: Mapping[str, Any]) -> None:
        super().__init__(status, problem)
        self.spent: Spent | None = parse_or_none(Spent, problem.get("spent"))
        self.budget: Budget | None = parse_or_none(Budget, problem.get("budget"))
        self.requested: Requested | None = parse_or_none(Requested, problem.get("requested"))
        self.would_spend: Spent | None = parse_or_none(Spent, problem.get("would_spend"))
        limit = problem.get("limit")
        self.limit: str | None = limit if isinstance(limit, str) else None
        exceeded = problem.get("blocks_exceeded")
        self.blocks_exceeded: list[str] = (
            [b for b in exceeded if isinstance(b, str)] if isinstance(exceeded, list) else []
        )


class RateLimited(HTTPStatusError):
    """429 after every retry."""


class ServerError(HTTPStatusError):
    """5xx after every retry (503: the database is unavailable)."""


def add_note(exc: BaseException, note: str) -> None:
    """``exc.add_note(note)`` where Python has it (3.11+); on 3.10 the note is dropped."""
    adder = getattr(exc, "add_note", None)
    if adder is not None:
        adder(note)


def stream_failure(exc: Exception, written: int) -> str:
    """The detail of a transport failure; after ``written`` characters of a streamed answer
    were handed on, it says that what was written is incomplete."""
    detail = f"{type(exc).__name__}: {exc}"
    if written:
        detail += f" (after {written} characters were written: the output is incomplete)"
    return detail


_BY_STATUS: dict[int, type[HTTPStatusError]] = {
    400: InvalidRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: InvalidRequest,
    422: InvalidRequest,
    429: RateLimited,
}


def error_for(response: httpx.Response) -> HTTPStatusError:
    """The exception for an error answer, built from its problem+json body."""
    try:
        body = response.json()
    except ValueError:
        body = None
    problem = body if isinstance(body, dict) else {"detail": response.text[:500]}
    problem.setdefault("title", response.reason_phrase)
    status = response.status_code
    if status == 409 and str(problem.get("type", "")).endswith("budget-exceeded"):
        return BudgetExceeded(status, problem)
    cls = _BY_STATUS.get(status)
    if cls is None:
        cls = ServerError if status >= 500 else InvalidRequest if status >= 400 else HTTPStatusError
    return cls(status, problem)


__all__ = [
    "BudgetExceeded",
    "Conflict",
    "DecodingError",
    "Forbidden",
    "HTTPStatusError",
    "InvalidRequest",
    "LedgerError",
    "NotFound",
    "RateLimited",
    "ServerError",
    "TransportError",
    "Unauthorized",
    "add_note",
    "error_for",
    "stream_failure",
]
