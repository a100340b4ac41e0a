"""Typed errors carrying their HTTP status, rendered as RFC 9457 problem+json by one handler.

::

    ProblemError
    +-- BadRequest (400)
    +-- Unauthorized (401)
    +-- Forbidden (403)
    +-- NotFound (404)
    +-- Conflict (409)
    |   +-- BudgetExceeded (409, with spent / budget / requested)
    +-- PayloadTooLarge (413)
    +-- Unprocessable (422)
"""

from __future__ import annotations

from typing import Any

PROBLEM_BASE = "https://privacy-ledger.dev/problems/"


class ProblemError(Exception):
    """An error with an HTTP status and problem+json fields."""

    status: int = 500
    slug: str = "internal"
    title: str = "Internal error"

    def __init__(self, detail: str, **extra: Any) -> None:
        super().__init__(detail)
        self.detail = detail
        self.extra = extra

    def to_problem(self) -> dict[str, Any]:
        """The problem+json body."""
        return {
            "type": PROBLEM_BASE + self.slug,
            "title": self.title,
            "status": self.status,
            "detail": self.detail,
            **self.extra,
        }


class BadRequest(ProblemError):
    status, slug, title = 400, "bad-request", "Bad request"


class Unauthorized(ProblemError):
    status, slug, title = 401, "unauthorized", "Missing or invalid API key"


class Forbidden(ProblemError):
    status, slug, title = 403, "forbidden", "Not allowed for this key"


class NotFound(ProblemError):
    status, slug, title = 404, "not-found", "Not found"


class Conflict(ProblemError):
    status, slug, title = 409, "conflict", "Conflict"


class BudgetExceeded(Conflict):
    slug, title = "budget-exceeded", "Privacy budget exceeded"


class PayloadTooLarge(ProblemError):
    status, slug, title = 413, "payload-too-large", "Request body too large"


class Unprocessable(ProblemError):
    status, slug, title = 422, "validation-error", "Invalid request"


__all__ = [
    "PROBLEM_BASE",
    "BadRequest",
    "BudgetExceeded",
    "Conflict",
    "Forbidden",
    "NotFound",
    "PayloadTooLarge",
    "ProblemError",
    "Unauthorized",
    "Unprocessable",
]
