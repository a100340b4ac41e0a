"""A dp_accounting ``DpEvent`` (as JSON) -> the mechanisms the ledger charges: the one
translation shared by ``POST /v1/datasets/{id}/charges/dp_event`` and the deprecated
``app.client.from_dp_event``.

``registry.mechanisms_from_dp_event`` translates the event tree (each kind module its own leaf
events). This module runs before it, over the same tree, and runs on every event the check its
kind declares beside its translation (``KindSpec.dp_event_checks``, looked up through
``registry.dp_event_check``): a value out of range is reported with the event's type, its own
field and value and where it sits in the tree (``events[2].event``), not the ledger field it
becomes, and a kind's rule may rewrite its event (a sampling over a composition that its
kind charges as sampling over one equivalent mechanism). What is generic lives here: the walk
over composite events, paths, merging; the helpers the checks share are in ``kinds._events``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app.accounting.kinds._events import (
    BELOW_MIN_EPSILON,
    COMPOSED,
    MAX_EVENT_COUNT,
    MAX_EVENT_DEPTH,
    SELF_COMPOSED,
    DpEventError,
    at,
    join,
)
from app.accounting.kinds._spec import Mechanism
from app.accounting.registry import (
    dp_event_check,
    mechanism_from_dict,
    mechanisms_from_dp_event,
    merge_counts,
)


def translate(event: Mapping[str, Any]) -> list[Mechanism]:
    """The mechanisms whose composition is ``event``, identical ones merged (counts added, in
    the order of first appearance); ``[]`` when it charges nothing. ``DpEventError`` (a
    ``ValueError``) names the event type, its field and value, and its place in the tree."""
    return merged(mechanisms_from_dp_event(prepared(event)))


def merged(mechanisms: list[Mechanism]) -> list[Mechanism]:
    """Identical mechanisms (every field but ``count``) merged into one, counts added, in the
    order of first appearance; ``DpEventError`` when one is then repeated more than
    ``MAX_EVENT_COUNT`` times in all (one ledger entry holds at most that many)."""
    out = []
    for d in merge_counts(m.to_dict() for m in mechanisms):
        if isinstance(d["count"], int) and d["count"] > MAX_EVENT_COUNT:
            raise DpEventError(
                f"identical events translated to {d['mechanism']} are repeated {d['count']} "
                f"times in all, at most {MAX_EVENT_COUNT}"
            )
        out.append(mechanism_from_dict(d))
    return out


def prepared(event: Mapping[str, Any]) -> Any:
    """``event`` after every part of it has passed its kind's check, each part as its check
    returns it (rewritten by the kind's rule, or as it was); see the module docstring. What the
    checks do not refuse, ``registry.mechanisms_from_dp_event`` does."""
    return _walk(event, "", 0)


# --- the walk ----------------------------------------------------------------------------------


def _walk(event: Any, path: str, depth: int, times: int = 1) -> Any:
    """``times``: the product of the counts of the SelfComposedDpEvents around ``event``."""
    if not isinstance(event, Mapping) or depth > MAX_EVENT_DEPTH:
        return event  # the registry's error
    kind = event.get("type")
    if kind == COMPOSED and isinstance(event.get("events"), list):
        return {
            **event,
            "events": [
                _walk(e, join(path, f"events[{i}]"), depth + 1, times)
                for i, e in enumerate(event["events"])
            ],
        }
    if kind == SELF_COMPOSED:
        count = event.get("count")
        if isinstance(count, int) and not isinstance(count, bool) and count > 0:
            times *= count
            if times > MAX_EVENT_COUNT:
                outer = times // count
                around = f" (inside counts multiplying to {outer})" if outer > 1 else ""
                raise DpEventError(
                    f"{at(SELF_COMPOSED, path)}: count {count}{around} repeats its event "
                    f"{times} times, at most {MAX_EVENT_COUNT}",
                    path,
                )
        return {
            **event,
            "event": _walk(event.get("event"), join(path, "event"), depth + 1, times),
        }
    check = dp_event_check(kind)
    return event if check is None else check(event, path, depth)


__all__ = [
    "BELOW_MIN_EPSILON",
    "DpEventError",
    "merged",
    "prepared",
    "translate",
]
