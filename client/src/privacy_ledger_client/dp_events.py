"""dp_accounting ``DpEvent`` objects as plain JSON, for the server to translate.

``dp_event_to_dict(event)`` writes any event generically: ``{"type": <class name>, <field>:
<value>, ...}``, nested events recursively, lists as lists. It reads the fields the event class
declares (attrs, as dp_accounting uses, or dataclasses) and never imports dp_accounting, so this
module works without the ``[dp]`` extra; the server decides which event types it can charge::

    dp_event_to_dict(dp_event.SelfComposedDpEvent(dp_event.GaussianDpEvent(2.0), 10))
    == {"type": "SelfComposedDpEvent",
        "event": {"type": "GaussianDpEvent", "noise_multiplier": 2.0},
        "count": 10}

One rewrite: a ``ComposedDpEvent`` directly inside another is written as part of it (their
events in order, one flat list; composition is associative, so every accountant composes the
same). A composition built one release at a time, ``event = ComposedDpEvent([event, step])``,
nests a level per step: written nested, 16 steps passed the server's depth limit and a few
hundred exhausted Python's stack here. Any other nesting deeper than ``MAX_DEPTH`` events is a
``ValueError``.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Mapping
from typing import Any

JSONValue = None | bool | int | float | str | list[Any] | dict[str, Any]

COMPOSED = "ComposedDpEvent"
MAX_DEPTH = 100
"""Events nested deeper than this (after compositions are flattened) are a ValueError, not a
RecursionError; the server reads far fewer levels."""


def dp_event_to_dict(event: Any) -> dict[str, Any]:
    """The JSON form of a ``DpEvent`` (see the module docstring).

    ``TypeError`` for an object that is not an attrs or dataclass instance, or a field value
    with no JSON form; ``ValueError`` for a non-finite number (JSON has none) or a field named
    ``type`` (it would collide with the class name).
    """
    return _event(event, type(event).__name__, 0)


def _event(event: Any, path: str, depth: int) -> dict[str, Any]:
    names = _field_names(event)
    if names is None:
        raise TypeError(
            f"{path}: {type(event).__name__} is not a DpEvent (no attrs/dataclass fields)"
        )
    if depth > MAX_DEPTH:
        raise ValueError(f"{path}: the event nests deeper than {MAX_DEPTH} events")
    if _is_composed(event):
        events = _flattened(event)
        return {
            "type": COMPOSED,
            "events": [_value(e, f"{path}.events[{i}]", depth + 1) for i, e in enumerate(events)],
        }
    out: dict[str, Any] = {"type": type(event).__name__}
    for name in names:
        if name == "type":
            raise ValueError(f"{path}: a field named 'type' collides with the event type")
        out[name] = _value(getattr(event, name), f"{path}.{name}", depth + 1)
    return out


def _is_composed(value: Any) -> bool:
    """A ``ComposedDpEvent``: that class name, one field ``events``, a list or tuple."""
    return (
        type(value).__name__ == COMPOSED
        and _field_names(value) == ["events"]
        and isinstance(value.events, list | tuple)
    )


def _flattened(event: Any) -> list[Any]:
    """The events of a ``ComposedDpEvent``, every ``ComposedDpEvent`` among them (at any depth)
    replaced by its own events, in order; iterative, so any depth of such nesting is read."""
    out: list[Any] = []
    stack = [iter(event.events)]
    while stack:
        for e in stack[-1]:
            if _is_composed(e):
                stack.append(iter(e.events))
                break
            out.append(e)
        else:
            stack.pop()
    return out


def _field_names(obj: Any) -> list[str] | None:
    """Public init fields of an attrs or dataclass instance, in declaration order."""
    attrs_fields = getattr(type(obj), "__attrs_attrs__", None)
    if attrs_fields is not None:
        return [a.name for a in attrs_fields if a.init and not a.name.startswith("_")]
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return [f.name for f in dataclasses.fields(obj) if f.init and not f.name.startswith("_")]
    return None


def _value(value: Any, path: str, depth: int) -> JSONValue:
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        x = float(value)
        if not math.isfinite(x):
            raise ValueError(f"{path}: {x} has no JSON form")
        return x
    if _field_names(value) is not None:
        return _event(value, path, depth)
    if depth > MAX_DEPTH:
        raise ValueError(f"{path}: the event nests deeper than {MAX_DEPTH} levels")
    if isinstance(value, Mapping):
        return {str(k): _value(v, f"{path}.{k}", depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_value(v, f"{path}[{i}]", depth + 1) for i, v in enumerate(value)]
    tolist = getattr(value, "tolist", None)  # numpy arrays and scalars, without importing numpy
    if callable(tolist):
        return _value(tolist(), path, depth)
    raise TypeError(f"{path}: {type(value).__name__} has no JSON form")


__all__ = ["dp_event_to_dict"]
