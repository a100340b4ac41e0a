"""Time blocks of a partitioned dataset: keys, ranges and their limits (pure functions).

A partitioned dataset (``"partition": {"unit": ...}``) gives each block of time its own budget.
Block keys are UTC calendar periods written as ISO 8601 dates:

* ``day``:   ``2026-11-23``
* ``week``:  ``2026-W48`` (ISO 8601 week: Monday to Sunday; week 1 holds the year's first
  Thursday; a year has 52 or 53 weeks)
* ``month``: ``2026-11``

Keys of one unit sort as text in time order, so a range ``{"from", "to"}`` (inclusive) is also
a range of strings. A charge's range may span at most ``MAX_SPAN[unit]`` blocks (366 days, 53
weeks, 36 months): the work of a charge grows with its span, and a wider range is almost
always a mistake. A dataset holds at most ``MAX_BLOCKS`` block rows in all (charged or held):
a budget change recomputes every block's spend under the dataset's lock and ``/budget`` counts
them, so their number bounds that work (audit bounds45 F1).
"""

from __future__ import annotations

import re
from datetime import date

from app.errors import Unprocessable

UNITS = ("day", "week", "month")
MAX_SPAN = {"day": 366, "week": 53, "month": 36}
"""The largest number of blocks one charge, reservation or listing may cover, per unit."""
MAX_BLOCKS = 10_000
"""The most block rows one partitioned dataset may hold (27 years of days, 192 of weeks): a
``PATCH`` of its budget rebudgets each (about 90 us of CPU per block on a 2-core machine)."""

_PATTERN = {
    "day": re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}"),  # ASCII digits: \d takes any script's
    "week": re.compile(r"[0-9]{4}-W[0-9]{2}"),
    "month": re.compile(r"[0-9]{4}-[0-9]{2}"),
}
_EXAMPLE = {"day": "2026-11-23", "week": "2026-W48", "month": "2026-11"}


def _position(unit: str, key: str) -> int:
    """A block's index on a line of consecutive blocks of ``unit`` (ValueError if invalid)."""
    if not isinstance(key, str) or _PATTERN[unit].fullmatch(key) is None:
        raise ValueError(key)
    if unit == "day":
        return date.fromisoformat(key).toordinal()
    if unit == "week":
        year, week = int(key[:4]), int(key[6:])
        return (date.fromisocalendar(year, week, 1).toordinal() - 1) // 7  # day 1 is a Monday
    year, month = int(key[:4]), int(key[5:])
    if not 1 <= year or not 1 <= month <= 12:
        raise ValueError(key)
    return year * 12 + month - 1


def _key(unit: str, position: int) -> str:
    if unit == "day":
        return date.fromordinal(position).isoformat()
    if unit == "week":
        year, week, _ = date.fromordinal(position * 7 + 1).isocalendar()
        return f"{year:04d}-W{week:02d}"
    return f"{position // 12:04d}-{position % 12 + 1:02d}"


def key_at(unit: str, position: int) -> str:
    """The key of the block at ``position`` (as ``check_key`` gives it)."""
    return _key(unit, position)


def check_key(unit: str, key: str, field: str = "block") -> int:
    """The position of ``key``; 422 naming the expected form when it is not a ``unit`` key."""
    try:
        return _position(unit, key)
    except ValueError:
        raise Unprocessable(
            f"{field} {ascii(key)[:40]} is not a {unit} block key (UTC, e.g. {_EXAMPLE[unit]!r})",
            partition_unit=unit,
        ) from None


def block_range(unit: str, first: str, last: str) -> list[str]:
    """Every key from ``first`` to ``last`` inclusive, in order; 422 for a malformed key, a
    reversed range or one wider than ``MAX_SPAN[unit]`` blocks."""
    a, b = check_key(unit, first, "blocks.from"), check_key(unit, last, "blocks.to")
    if b < a:
        raise Unprocessable(
            f"blocks.to {last!r} is before blocks.from {first!r} (the range is inclusive)"
        )
    span = b - a + 1
    if span > MAX_SPAN[unit]:
        raise Unprocessable(
            f"the range {first}..{last} covers {span} {unit} blocks; at most {MAX_SPAN[unit]} "
            "per request",
            max_span=MAX_SPAN[unit],
        )
    return [_key(unit, p) for p in range(a, b + 1)]


def check_block_count(unit: str, stored: int, new: list[str]) -> None:
    """422 when ``new`` block rows (keys a charge, dry run or reservation would add) would take
    a dataset holding ``stored`` past ``MAX_BLOCKS``."""
    if new and stored + len(new) > MAX_BLOCKS:
        raise Unprocessable(
            f"the dataset holds {stored} {unit} blocks and this request would add "
            f"{len(new)} ({new[0]}..{new[-1]} has blocks nobody charged yet); a dataset may hold "
            f"at most {MAX_BLOCKS}: charge blocks that exist, or partition a new dataset (or one "
            "by a longer unit) for the rest",
            max_blocks=MAX_BLOCKS,
            stored_blocks=stored,
        )


__all__ = [
    "MAX_BLOCKS",
    "MAX_SPAN",
    "check_block_count",
    "UNITS",
    "block_range",
    "check_key",
    "key_at",
]
