"""Date-time query parameters (``since``, ``until``, ``created_after``, ``created_before``).

The OpenAPI document declares them ``date-time``; pydantic's lax mode also reads a number as a
Unix timestamp (``until=0.5``), which a client reading the document cannot expect. A value that
is only a number is refused with a 422 naming the expected form.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import BeforeValidator

_NUMBER = re.compile(r"\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*")


def _not_a_number(value: Any) -> Any:
    if isinstance(value, int | float) or (isinstance(value, str) and _NUMBER.fullmatch(value)):
        raise ValueError(
            "expected an ISO 8601 date-time such as 2026-11-23T12:00:00Z, not a number"
        )
    return value


QueryTime = Annotated[datetime, BeforeValidator(_not_a_number)]
"""A date-time query parameter: ISO 8601 only."""


def utc(ts: datetime | None) -> datetime | None:
    """A time without an offset is UTC."""
    return ts.replace(tzinfo=UTC) if ts is not None and ts.tzinfo is None else ts


__all__ = ["QueryTime", "utc"]
