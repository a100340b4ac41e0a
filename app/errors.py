"""Typed errors carrying their HTTP status, and the one builder of RFC 9457 problem bodies.

Services raise these; one handler (``app.api.problems``) renders them as
``application/problem+json``, and each route declares the ones it can answer with
(``app.api.problems.responses``)::

    ProblemError
    +-- BadRequest (400)
    +-- Unauthorized (401)
    +-- Forbidden (403)
    +-- NotFound (404)
    +-- Conflict (409)
    |   +-- BudgetExceeded (409, with spent / budget / requested)
    |   +-- DatasetArchived (409, the dataset is archived)
    +-- PayloadTooLarge (413)
    +-- Unprocessable (422)
    +-- DatabaseUnavailable (503, Retry-After)
    +-- ServerBusy (503, Retry-After: too many unknown API keys being checked at once)
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

PROBLEM_BASE = "https://privacy-ledger.dev/problems/"

TITLES: dict[int, str] = {
    400: "Bad request",
    401: "Missing or invalid API key",
    403: "Not allowed for this key",
    404: "Not found",
    405: "Method not allowed",
    409: "Conflict",
    413: "Request body too large",
    415: "Unsupported media type",
    422: "Invalid request",
    500: "Internal error",
    503: "Database unavailable",
}
"""Default titles by status, for answers that are not a ``ProblemError``."""


def json_finite(value: Any) -> Any:
    """``value`` with every non-finite float (an epsilon no conversion can bound, say) replaced
    by None: JSON has no infinity, so answers and stored JSON carry ``null`` instead."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: json_finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_finite(v) for v in value]
    return value


def problem_body(
    status: int, detail: str, *, slug: str | None = None, title: str | None = None, **extra: Any
) -> dict[str, Any]:
    """The problem+json body: ``type``, ``title``, ``status``, ``detail`` and extra members."""
    title = title or TITLES.get(status, "Error")
    slug = slug or title.lower().replace(" ", "-")
    return {
        "type": PROBLEM_BASE + slug,
        "title": title,
        "status": status,
        "detail": detail,
        **extra,
    }


class ProblemError(Exception):
    """An error with an HTTP status and problem+json fields."""

    status: ClassVar[int] = 500
    slug: ClassVar[str] = "internal"
    title: ClassVar[str] = "Internal error"
    description: ClassVar[str] = "unexpected error"

    def __init__(self, detail: str, **extra: Any) -> None:
        super().__init__(detail)
        self.detail = detail
        self.extra = extra

    def to_problem(self) -> dict[str, Any]:
        """The problem+json body."""
        return problem_body(
            self.status, self.detail, slug=self.slug, title=self.title, **self.extra
        )


class BadRequest(ProblemError):
    status, slug, title = 400, "bad-request", "Bad request"
    description = "malformed request (e.g. the body is not JSON)"


class Unauthorized(ProblemError):
    status, slug, title = 401, "unauthorized", "Missing or invalid API key"
    description = "missing, unknown or revoked API key"


class Forbidden(ProblemError):
    status, slug, title = 403, "forbidden", "Not allowed for this key"
    description = "the key's role or scope does not allow this"


class NotFound(ProblemError):
    status, slug, title = 404, "not-found", "Not found"
    description = "no such resource (or not visible to a scoped key)"


class Conflict(ProblemError):
    status, slug, title = 409, "conflict", "Conflict"
    description = "the resource's state does not allow this"


class BudgetExceeded(Conflict):
    slug, title = "budget-exceeded", "Privacy budget exceeded"
    description = "over budget: the problem carries spent, budget, requested and would_spend"


class DatasetArchived(Conflict):
    slug, title = "dataset-archived", "Dataset archived"
    description = "the dataset is archived: it refuses charges and reservations (unarchive it)"


class PayloadTooLarge(ProblemError):
    status, slug, title = 413, "payload-too-large", "Request body too large"
    description = "request body too large"


class Unprocessable(ProblemError):
    status, slug, title = 422, "validation-error", "Invalid request"
    description = "invalid request: the detail names the bad value"


class DatabaseUnavailable(ProblemError):
    status, slug, title = 503, "database-unavailable", "Database unavailable"
    description = "the database is unavailable; retry (charges: with the same Idempotency-Key)"


class TotalsDrifted(ProblemError):
    status, slug, title = 503, "totals-drifted", "Dataset totals need rebuilding"
    description = (
        "the dataset's stored totals disagree with its ledger (nothing was recorded): an operator "
        "must run 'privacy-ledger verify --rebuild'"
    )


class ServerBusy(ProblemError):
    status, slug, title = 503, "server-busy", "Server busy"
    description = (
        "too many API keys the server has not seen yet are being checked at once; retry after "
        "Retry-After seconds"
    )


__all__ = [
    "json_finite",
    "PROBLEM_BASE",
    "TITLES",
    "BadRequest",
    "BudgetExceeded",
    "Conflict",
    "DatabaseUnavailable",
    "Forbidden",
    "NotFound",
    "PayloadTooLarge",
    "ProblemError",
    "ServerBusy",
    "Unauthorized",
    "Unprocessable",
    "problem_body",
]
