"""What the kinds share to translate and check dp_accounting events (``DpEvent`` as JSON dicts,
``{"type": class name, **fields}``).

* The composite events' shape (``COMPOSED``, ``SELF_COMPOSED``, ``NO_OP``, ``MAX_EVENT_DEPTH``,
  ``MAX_EVENT_COUNT``): the generic walk (``registry.mechanisms_from_dp_event``,
  ``dp_events.prepared``) and a kind whose rule looks into a composition (Poisson sampling over
  composed Gaussians) read the same ones.
* ``DpEventError`` and the helpers a kind's ``KindSpec.dp_event_checks`` build their messages
  with: an error names the event type, its own field and value and where in the tree it sits
  (``events[2].event``), not the ledger field it becomes ("LaplaceDpEvent: noise_multiplier
  1e+10 gives epsilon 1e-10, below ..."). Nothing is clamped: a value outside the range its
  kind accepts is refused, and a loss below the smallest pure-DP epsilon (``MIN_EPSILON``) says
  how to record it as an upper bound.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from app.accounting.kinds._spec import MIN_EPSILON, Param, json_float

COMPOSED = "ComposedDpEvent"
SELF_COMPOSED = "SelfComposedDpEvent"
NO_OP = "NoOpDpEvent"
COMPOSITE_FIELDS: Mapping[str, frozenset[str]] = {
    COMPOSED: frozenset({"events"}),
    SELF_COMPOSED: frozenset({"event", "count"}),
    NO_OP: frozenset(),
}
"""The composite (and empty) event types every translation knows, with the fields each has."""

MAX_EVENT_DEPTH = 32
MAX_EVENT_COUNT = 1_000_000_000

BELOW_MIN_EPSILON = (
    f"a loss below the smallest epsilon the ledger accepts ({MIN_EPSILON:g}) is refused, not "
    "rounded; to record it, charge an upper bound instead, e.g. "
    f'{{"mechanism": "pure_dp", "epsilon": {MIN_EPSILON:g}}}'
)

NO_NOISE = "adds no noise: not differentially private"


class DpEventError(ValueError):
    """A DpEvent the ledger cannot charge; ``path`` is where in the tree (``events[1].event``,
    ``""`` for the event itself)."""

    def __init__(self, message: str, path: str = "") -> None:
        super().__init__(message)
        self.path = path


def at(event_type: str, path: str) -> str:
    """How an error names an event: its type, and its place unless it is the root."""
    return f"{event_type} at {path}" if path else event_type


def join(path: str, part: str) -> str:
    """``path`` extended by a field (``event``) or an index (``[2]``)."""
    return f"{path}.{part}" if path and not part.startswith("[") else f"{path}{part}"


def number(event: Mapping[str, Any], name: str) -> float | None:
    """A numeric field, or None when it is not a number (the translation's error names it); an
    integer beyond the float range reads as an infinity (``json_float``)."""
    value = event.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return json_float(value)


def only(event: Mapping[str, Any], allowed: tuple[str, ...], path: str) -> None:
    """``DpEventError`` for a field of ``event`` other than ``type`` and ``allowed``."""
    known = {"type", *allowed}
    if extra := sorted(str(k) for k in event if k not in known):
        raise DpEventError(
            f"{at(str(event.get('type')), path)}: unknown field(s) "
            f"{', '.join(repr(n) for n in extra)}: nothing is charged for an event with fields "
            "this ledger does not read (a sensitivity or delta left out would under-state its "
            "loss)",
            path,
        )


def outside(p: Param, value: float) -> str | None:
    """Why ``value`` is outside ``p``'s range ("below the smallest accepted epsilon 1e-09"),
    or None."""
    lo = p.minimum if p.minimum is not None else -math.inf
    hi = p.maximum if p.maximum is not None else math.inf
    if (p.exclusive_minimum and value <= lo) or (p.exclusive_maximum and value >= hi):
        brackets = ("(" if p.exclusive_minimum else "[", ")" if p.exclusive_maximum else "]")
        return f"outside the accepted {p.name} range {brackets[0]}{lo:g}, {hi:g}{brackets[1]}"
    if value < lo:
        return f"below the smallest accepted {p.name} {lo:g}"
    if value > hi:
        return f"above the largest accepted {p.name} {hi:g}"
    return None


def sign(where: str, field: str, value: float, path: str, *, zero: str | None = None) -> None:
    """Not finite, negative, or (``zero``: why 0 is refused) zero: said as such."""
    if not math.isfinite(value):
        raise DpEventError(f"{where}: {field} {value} is not finite", path)
    if value < 0:
        raise DpEventError(f"{where}: {field} {value!r} is negative", path)
    if value == 0 and zero is not None:
        raise DpEventError(f"{where}: {field} 0 {zero}", path)


def epsilon_in_range(where: str, what: str, p: Param, epsilon: float, path: str) -> None:
    """A pure-DP epsilon derived from the event's fields (``what``), in the range of the kind's
    epsilon field ``p``."""
    why = outside(p, epsilon)
    if why is None:
        return
    rule = f": {BELOW_MIN_EPSILON}" if epsilon < MIN_EPSILON else ""
    raise DpEventError(f"{where}: {what} gives epsilon {epsilon:g}, {why}{rule}", path)


def direct(where: str, field: str, value: float, p: Param, path: str) -> None:
    """A field that is the ledger parameter ``p`` itself."""
    sign(where, field, value, path)
    why = outside(p, value)
    if why is not None:
        raise DpEventError(f"{where}: {field} {value!r} is {why}", path)


__all__ = [
    "BELOW_MIN_EPSILON",
    "COMPOSED",
    "COMPOSITE_FIELDS",
    "MAX_EVENT_COUNT",
    "MAX_EVENT_DEPTH",
    "NO_NOISE",
    "NO_OP",
    "SELF_COMPOSED",
    "DpEventError",
    "at",
    "direct",
    "epsilon_in_range",
    "join",
    "number",
    "only",
    "outside",
    "sign",
]
