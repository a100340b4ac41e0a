"""Date-time query parameters (``since``, ``until``, ``created_after``, ``created_before``).

The OpenAPI document declares them ``date-time``; pydantic's lax mode also reads a number as a
Unix timestamp (``until=0.5``), which a client reading the document cannot expect. A value that
is only a number is refused with a 422 naming the expected form.

Every value is normalised to UTC here, once, for every route that declares a ``QueryTime``: a
value with an offset is converted (``11:00+05:00`` is ``06:00Z``), one without an offset is
taken as UTC. SQLite stores the UTC digits of a time without its offset, and compares a query
value's digits the same way, so an offset left on the value would move the filter by that many
hours there (PostgreSQL compares instants, so both agree once the value is UTC). An instant
before the first or after the last representable UTC time (``0001-01-01T00:00+14:00``) becomes
that first or last time: no stored row lies beyond either, so the filter selects the same rows.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator

_NUMBER = re.compile(r"\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*")
_FIRST = datetime.min.replace(tzinfo=UTC)
_LAST = datetime.max.replace(tzinfo=UTC)


def _not_a_number(value: Any) -> Any:
    if isinstance(value, int | float) or (isinstance(value, str) and _NUMBER.fullmatch(value)):
        raise ValueError(
            "expected an ISO 8601 date-time such as 2026-11-23T12:00:00Z, not a number"
        )
    return value


def as_utc(ts: datetime) -> datetime:
    """``ts`` as an aware UTC time: converted when it has an offset, taken as UTC when it has
    none; clamped to the representable range when the conversion would leave it."""
    if ts.tzinfo is None:
        return ts.replace(tzinfo=UTC)
    try:
        return ts.astimezone(UTC)
    except OverflowError:  # only at the ends of the calendar: year 1 east of UTC, 9999 west
        return _FIRST if ts.year == datetime.min.year else _LAST


QueryTime = Annotated[datetime, BeforeValidator(_not_a_number), AfterValidator(as_utc)]
"""A date-time query parameter: ISO 8601 only, normalised to UTC."""


__all__ = ["QueryTime", "as_utc"]
