"""dp_accounting ``DpEvent`` objects as plain JSON, for the server to translate.

``dp_event_to_dict(event)`` writes any event generically: ``{"type": <class name>, <field>:
<value>, ...}``, nested events recursively, lists as lists. It reads the fields the event class
declares (attrs, as dp_accounting uses, or dataclasses) and never imports dp_accounting, so this
module works without the ``[dp]`` extra; the server decides which event types it can charge::

    dp_event_to_dict(dp_event.SelfComposedDpEvent(dp_event.GaussianDpEvent(2.0), 10))
    == {"type": "SelfComposedDpEvent",
        "event": {"type": "GaussianDpEvent", "noise_multiplier": 2.0},
        "count": 10}
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Mapping
from typing import Any

JSONValue = None | bool | int | float | str | list[Any] | dict[str, Any]


def dp_event_to_dict(event: Any) -> dict[str, Any]:
    """The JSON form of a ``DpEvent`` (see the module docstring).

    ``TypeError`` for an object that is not an attrs or dataclass instance, or a field value
    with no JSON form; ``ValueError`` for a non-finite number (JSON has none) or a field named
    ``type`` (it would collide with the class name).
    """
    return _event(event, type(event).__name__)


def _event(event: Any, path: str) -> dict[str, Any]:
    names = _field_names(event)
    if names is None:
        raise TypeError(
            f"{path}: {type(event).__name__} is not a DpEvent (no attrs/dataclass fields)"
        )
    out: dict[str, Any] = {"type": type(event).__name__}
    for name in names:
        if name == "type":
            raise ValueError(f"{path}: a field named 'type' collides with the event type")
        out[name] = _value(getattr(event, name), f"{path}.{name}")
    return out


def _field_names(obj: Any) -> list[str] | None:
    """Public init fields of an attrs or dataclass instance, in declaration order."""
    attrs_fields = getattr(type(obj), "__attrs_attrs__", None)
    if attrs_fields is not None:
        return [a.name for a in attrs_fields if a.init and not a.name.startswith("_")]
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return [f.name for f in dataclasses.fields(obj) if f.init and not f.name.startswith("_")]
    return None


def _value(value: Any, path: str) -> JSONValue:
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
        return _event(value, path)
    if isinstance(value, Mapping):
        return {str(k): _value(v, f"{path}.{k}") for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_value(v, f"{path}[{i}]") for i, v in enumerate(value)]
    tolist = getattr(value, "tolist", None)  # numpy arrays and scalars, without importing numpy
    if callable(tolist):
        return _value(tolist(), path)
    raise TypeError(f"{path}: {type(value).__name__} has no JSON form")


__all__ = ["dp_event_to_dict"]
