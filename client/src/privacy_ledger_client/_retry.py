"""When to send a request again, and how long to wait first (shared by both clients)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx

from privacy_ledger_client._calls import Call, Delivery

TRANSIENT_STATUSES = frozenset({429, 502, 503, 504})
"""Answers worth waiting out: rate limited, a gateway failure, the database unavailable (503)."""

_UNSENT = (httpx.ConnectError, httpx.ConnectTimeout)

SERVER_BUSY = "/problems/server-busy"
"""The problem type (its path) of a 503 answered before the request was read."""


def _unread(response: httpx.Response) -> bool:
    """A 503 ``server-busy`` problem: the server refused the request before reading it."""
    if response.status_code != 503:
        return False
    try:
        problem = response.json()
    except ValueError:
        return False
    kind = problem.get("type") if isinstance(problem, dict) else None
    return isinstance(kind, str) and kind.endswith(SERVER_BUSY)


@dataclass(frozen=True)
class RetryPolicy:
    """``retries`` attempts after the first, waiting ``backoff * 2**attempt`` seconds (at most
    ``max_backoff``; a numeric ``Retry-After`` header is honoured within the same cap)."""

    retries: int = 4
    backoff: float = 0.2
    max_backoff: float = 10.0

    def __post_init__(self) -> None:
        if self.retries < 0 or self.backoff < 0 or self.max_backoff < 0:
            raise ValueError(f"retry settings must be >= 0, got {self}")

    def after_error(self, call: Call[Any], exc: httpx.TransportError, attempt: int) -> bool:
        """Send again after a transport failure? Always for safe calls; otherwise only when the
        connection was never made, so the server surely did not see the request."""
        if attempt >= self.retries:
            return False
        return call.delivery is Delivery.SAFE or isinstance(exc, _UNSENT)

    def after_status(self, call: Call[Any], response: httpx.Response, attempt: int) -> bool:
        """Send again after a transient error answer: safe calls only (a 503 may come after the
        database committed, and repeating a reservation would leave a second hold), except a
        503 ``server-busy``, which the server answers before it reads the request (too many
        unknown keys waiting for their check): every call may repeat it."""
        if attempt >= self.retries or response.status_code not in TRANSIENT_STATUSES:
            return False
        return call.delivery is Delivery.SAFE or _unread(response)

    def delay(self, attempt: int, response: httpx.Response | None) -> float:
        """Seconds to wait before attempt ``attempt + 1``."""
        wait = self.backoff * float(2**attempt)
        if response is not None:
            header = response.headers.get("Retry-After", "")
            if header.strip().isdigit():
                wait = float(header)
        return min(wait, self.max_backoff)


__all__ = ["TRANSIENT_STATUSES", "RetryPolicy"]
