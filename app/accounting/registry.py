"""Everything derived from the registry of mechanism kinds (``app.accounting.kinds``).

* ``kind_names()`` / ``spec(kind)``: the kinds and their declarations (fields with ranges,
  units and help, description, neighbouring relation, calibration parameters, CLI flags);
* ``mechanism_from_dict``: a ledger row or API body -> validated mechanism value object;
* ``calibration_parameters()``: kind -> {parameter: "min" | "max"};
* ``mechanisms_from_dp_event``: a dp_accounting ``DpEvent`` described as a plain JSON dict ->
  mechanisms. Composite events are handled here; each kind module translates its own leaf
  events, and ``dp_event_check`` gives the check a kind declares beside a translation (run by
  ``dp_events.prepared`` over the whole tree first). dp_accounting is not imported: a client
  serialises any event generically (``{"type": class name, **fields}``, nested events as
  dicts) and the server translates.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any

from app.accounting.kinds import KINDS
from app.accounting.kinds._events import (
    COMPOSED,
    COMPOSITE_FIELDS,
    MAX_EVENT_COUNT,
    MAX_EVENT_DEPTH,
    NO_OP,
    SELF_COMPOSED,
)
from app.accounting.kinds._spec import (
    Direction,
    DpEventCheck,
    DpEventTranslator,
    KindSpec,
    Mechanism,
    check_event_fields,
    unknown_event_fields,
)

MECHANISMS: Mapping[str, type[Mechanism]] = MappingProxyType(
    {name: s.mechanism for name, s in KINDS.items()}
)
"""Every mechanism class, by its wire name."""


def kind_names() -> list[str]:
    """The wire names of all kinds, sorted."""
    return list(KINDS)


def spec(kind: str) -> KindSpec:
    """The declaration of ``kind`` (ValueError naming the known kinds otherwise)."""
    try:
        return KINDS[kind]
    except (KeyError, TypeError):
        raise ValueError(f"unknown mechanism {kind!r}; known: {', '.join(KINDS)}") from None


def mechanism_from_dict(data: Mapping[str, Any]) -> Mechanism:
    """Build a mechanism from its JSON description (``{"mechanism": kind, ...}``; the ledger's
    version marker ``"v"`` is ignored). Unknown kinds or fields raise ``ValueError``."""
    params = dict(data)
    params.pop("v", None)
    kind = params.pop("mechanism", None)
    try:
        return spec(kind).mechanism.from_fields(params)
    except TypeError as exc:
        raise ValueError(f"{kind}: {exc}") from None


def merge_counts(entries: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Mechanisms as on the wire with identical ones (every field but ``count``; the ledger's
    ``"v"`` dropped) merged into one, their counts added, in the order of first appearance."""
    groups: dict[str, dict[str, Any]] = {}
    for entry in entries:
        fields = dict(entry)
        fields.pop("v", None)
        count = fields.pop("count", 1)
        key = json.dumps(fields, sort_keys=True, default=str)
        if key in groups:
            groups[key]["count"] += count
        else:
            groups[key] = {**fields, "count": count}
    return list(groups.values())


def calibration_parameters() -> dict[str, dict[str, Direction]]:
    """kind -> {parameter calibration can solve for: direction}, first = the default."""
    return {name: dict(s.calibration) for name, s in KINDS.items()}


# --- dp_accounting events -------------------------------------------------------------------


def leaf_translators(kinds: Iterable[KindSpec]) -> dict[str, DpEventTranslator]:
    """dp_accounting event type -> the translator of the one kind that declares it; TypeError
    naming both kinds when two declare the same type (the later one took it over silently)."""
    leaves: dict[str, DpEventTranslator] = {}
    owners: dict[str, str] = {}
    for s in kinds:
        for event_type, translate in s.dp_events.items():
            if event_type in owners:
                raise TypeError(
                    f"kinds {owners[event_type]!r} and {s.name!r} both translate {event_type}: "
                    "an event type belongs to one kind"
                )
            owners[event_type] = s.name
            leaves[event_type] = translate
    return leaves


def leaf_checks(kinds: Iterable[KindSpec]) -> dict[str, DpEventCheck]:
    """dp_accounting event type -> the check its kind declares beside its translation
    (``KindSpec.dp_event_checks``; a kind checks only types it translates, and a type belongs to
    one kind: ``leaf_translators``)."""
    return {t: check for s in kinds for t, check in s.dp_event_checks.items()}


_LEAVES: dict[str, DpEventTranslator] = leaf_translators(KINDS.values())
_CHECKS: dict[str, DpEventCheck] = leaf_checks(KINDS.values())


def dp_event_check(event_type: object) -> DpEventCheck | None:
    """The check of events of type ``event_type`` its kind declares (None: none, or no kind
    translates it)."""
    return _CHECKS.get(event_type) if isinstance(event_type, str) else None


def dp_event_types() -> list[str]:
    """Every dp_accounting event type that has a translation."""
    return sorted([*_LEAVES, *COMPOSITE_FIELDS])


def mechanisms_from_dp_event(event: Mapping[str, Any]) -> list[Mechanism]:
    """The mechanisms whose composition is the dp_accounting event ``event``, a JSON dict
    ``{"type": "<DpEvent class name>", **its fields}``:

    * ``COMPOSED``: ``{"events": [...]}``, the concatenation;
    * ``SELF_COMPOSED``: ``{"event": {...}, "count": n}``, each repeated n times;
    * ``NO_OP``: nothing; leaf types: the translations the kind modules declare
      (``KindSpec.dp_events``).

    Any other type (dp_accounting's non-private and unsupported events, sampling schemes
    without a formula here, ...) raises ``ValueError`` naming it.
    """
    return _translate(event, 0)


class _Reads(Mapping[str, Any]):
    """An event's fields, remembering which ones its translator read."""

    def __init__(self, event: Mapping[str, Any]) -> None:
        self._event = event
        self.read: set[str] = {"type"}

    def __getitem__(self, key: str) -> Any:
        self.read.add(key)
        return self._event[key]

    def __iter__(self) -> Any:
        return iter(self._event)

    def __len__(self) -> int:
        return len(self._event)

    def unread(self) -> list[str]:
        return sorted(str(k) for k in self._event if k not in self.read)


def _translate(event: Mapping[str, Any], depth: int) -> list[Mechanism]:
    """An event's mechanisms; ValueError for a field no translation reads (an event with a
    ``sensitivity`` its translation ignores was charged at sensitivity 1)."""
    if not isinstance(event, Mapping):
        raise ValueError(f"a DpEvent must be a JSON object with a 'type', got {event!r}")
    if depth > MAX_EVENT_DEPTH:
        raise ValueError(f"DpEvent nested deeper than {MAX_EVENT_DEPTH} levels")
    kind = event.get("type")
    allowed = COMPOSITE_FIELDS.get(kind) if isinstance(kind, str) else None
    if allowed is not None:
        check_event_fields(event, allowed)
    if kind == COMPOSED:
        events = event.get("events")
        if not isinstance(events, list):
            raise ValueError(f"{COMPOSED} needs a list 'events'")
        return [m for e in events for m in _translate(e, depth + 1)]
    if kind == SELF_COMPOSED:
        count = event.get("count")
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ValueError(f"{SELF_COMPOSED}: count must be an integer >= 0, got {count!r}")
        if count > MAX_EVENT_COUNT:
            raise ValueError(f"{SELF_COMPOSED}: count must be <= {MAX_EVENT_COUNT}")
        inner = _translate(event.get("event"), depth + 1)  # type: ignore[arg-type]
        return [] if count == 0 else [m.repeated(count) for m in inner]
    if kind == NO_OP:
        return []
    translate = _LEAVES.get(kind) if isinstance(kind, str) else None
    if translate is None:
        raise ValueError(f"{kind} has no translation to privacy-ledger mechanisms")
    reads = _Reads(event)
    mechanisms = translate(reads, lambda e: _translate(e, depth + 1))
    if extra := reads.unread():
        raise unknown_event_fields(kind, extra)
    return mechanisms


__all__ = [
    "KINDS",
    "MECHANISMS",
    "MAX_EVENT_COUNT",
    "MAX_EVENT_DEPTH",
    "calibration_parameters",
    "dp_event_check",
    "dp_event_types",
    "kind_names",
    "leaf_checks",
    "leaf_translators",
    "mechanism_from_dict",
    "merge_counts",
    "mechanisms_from_dp_event",
    "spec",
]
