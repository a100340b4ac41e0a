"""Each leaf DpEvent's check is declared by the kind that translates it (``KindSpec.
dp_event_checks``, beside ``dp_events``); the generic walk (``app.accounting.dp_events``) and
the registry hold no table of event types or kinds of their own."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Mapping
from typing import Any

import pytest

from app.accounting import dp_events, registry
from app.accounting.kinds import KINDS
from app.accounting.kinds._events import COMPOSITE_FIELDS, DpEventError, at, number
from app.accounting.kinds._spec import KindSpec, Mechanism, Translate
from tests import toy_kind as toy


def test_each_translated_event_types_check_comes_from_its_kinds_spec() -> None:
    checked = 0
    for s in KINDS.values():
        for event_type, check in s.dp_event_checks.items():
            assert event_type in s.dp_events
            assert registry.dp_event_check(event_type) is check
            assert check.__module__ == s.mechanism.__module__, (event_type, s.name)
            checked += 1
    assert registry._CHECKS == registry.leaf_checks(KINDS.values())
    assert len(registry._CHECKS) == checked
    # every leaf type with a translation has a check (each of today's kinds declares one)
    leaves = set(registry.dp_event_types()) - set(COMPOSITE_FIELDS)
    assert set(registry._CHECKS) == leaves


def test_the_generic_walk_names_no_event_type_and_no_kind() -> None:
    """What a grep would check: the leaf event types and the kinds' names appear nowhere in the
    source of ``dp_events`` and ``registry``, and neither holds a table keyed by them."""
    leaves = set(registry.dp_event_types()) - set(COMPOSITE_FIELDS)
    for module in (dp_events, registry):
        source = inspect.getsource(module)
        for name in sorted(leaves | set(KINDS)):
            assert f'"{name}"' not in source and f"``{name}``" not in source, (module, name)
        for value in vars(module).values():
            if isinstance(value, Mapping) and value is not registry._CHECKS:
                assert value is registry._LEAVES or not (set(value) & leaves), module


def _from_toy_event(event: Mapping[str, Any], translate: Translate) -> list[Mechanism]:
    return [toy.ToyGeometric(scale=event["noise_multiplier"])]  # type: ignore[call-arg]


def _check_toy_event(event: Mapping[str, Any], path: str, depth: int) -> Mapping[str, Any]:
    nm = number(event, "noise_multiplier")
    if nm is not None and nm <= 0:
        raise DpEventError(f"{at('ToyDpEvent', path)}: noise_multiplier {nm!r} is not > 0", path)
    return event


@pytest.fixture
def toy_events(monkeypatch: pytest.MonkeyPatch) -> KindSpec:
    """The toy kind translating and checking a ``ToyDpEvent`` of its own, in the registry's
    event tables as a kind module's declaration would put it."""
    spec = dataclasses.replace(
        toy.SPEC,
        dp_events={"ToyDpEvent": _from_toy_event},
        dp_event_checks={"ToyDpEvent": _check_toy_event},
    )
    kinds = [*KINDS.values(), spec]
    monkeypatch.setattr(registry, "_LEAVES", registry.leaf_translators(kinds))
    monkeypatch.setattr(registry, "_CHECKS", registry.leaf_checks(kinds))
    monkeypatch.setattr(registry, "KINDS", {**KINDS, toy.NAME: spec})
    return spec


def test_a_new_kinds_declared_check_is_run_by_the_walk(toy_events: KindSpec) -> None:
    event = {
        "type": "ComposedDpEvent",
        "events": [{"type": "NoOpDpEvent"}, {"type": "ToyDpEvent", "noise_multiplier": -2.0}],
    }
    with pytest.raises(DpEventError) as info:
        dp_events.translate(event)
    assert str(info.value) == "ToyDpEvent at events[1]: noise_multiplier -2.0 is not > 0"
    assert info.value.path == "events[1]"
    ok = {"type": "SelfComposedDpEvent", "event": {**event["events"][1], "noise_multiplier": 4.0}}
    ok["count"] = 3
    [m] = dp_events.translate(ok)
    assert m.to_dict() == {**toy.ToyGeometric(scale=4.0).to_dict(), "count": 3}  # type: ignore[call-arg]


def test_a_check_without_its_translation_is_refused() -> None:
    with pytest.raises(TypeError, match="'toy_geometric' checks ToyDpEvent but does not"):
        dataclasses.replace(toy.SPEC, dp_event_checks={"ToyDpEvent": _check_toy_event})


_G = {"type": "GaussianDpEvent", "noise_multiplier": 1e5}


def _self(event: dict[str, Any], count: int) -> dict[str, Any]:
    return {"type": "SelfComposedDpEvent", "event": event, "count": count}


@pytest.mark.parametrize(
    ("event", "path", "says"),
    [
        (_self(_self(_G, 100_000), 100_000), "event", "10000000000 times"),
        (
            {"type": "ComposedDpEvent", "events": [_G, _self(_self(_G, 10**9), 2)]},
            "events[1].event",
            "2000000000 times",
        ),
        (
            {"type": "ComposedDpEvent", "events": [_self(_G, 10**10)]},
            "events[0]",
            "10000000000 times",
        ),
        (
            {"type": "ComposedDpEvent", "events": [_self(_G, 6 * 10**8), _self(_G, 6 * 10**8)]},
            "",
            "1200000000 times in all",
        ),
    ],
)
def test_too_many_repetitions_say_how_many_and_where(
    event: dict[str, Any], path: str, says: str
) -> None:
    """Nested SelfComposedDpEvent counts multiply, and identical events are merged: either could
    pass every count's own range and make an entry of more repetitions than one may hold, which
    was refused as "count must be an integer in [1, 1e+09], got 10000000000" (a count the
    caller never wrote, at no place in the event). The error says how many repetitions in all,
    the limit, and where."""
    with pytest.raises(DpEventError) as info:
        dp_events.translate(event)
    message = str(info.value)
    assert says in message and "1000000000" in message, message
    assert "must be an integer in" not in message
    assert info.value.path == path
