"""``dp_event_to_dict``: every dp_accounting DpEvent as plain JSON, checked against dp_accounting.

Oracles: dp_accounting's own ``to_named_tuple`` (its serialisation for callers that avoid the
dependency), and rebuilding the event from our JSON with dp_accounting's classes.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
from typing import Any

import numpy as np
import pytest
from dp_accounting import dp_event as de
from dp_accounting.rdp import rdp_privacy_accountant as rdpa
from privacy_ledger_client import dp_event_to_dict

GAUSS = de.GaussianDpEvent(1.1)
EVENTS: list[de.DpEvent] = [
    de.NoOpDpEvent(),
    de.NonPrivateDpEvent(),
    de.UnsupportedDpEvent(),
    GAUSS,
    de.LaplaceDpEvent(2.0),
    de.DiscreteLaplaceDpEvent(noise_parameter=0.5, sensitivity=3),
    de.RandomizedResponseDpEvent(noise_parameter=0.25, num_buckets=4),
    de.ZCDpEvent(rho=0.01, xi=0.5),
    de.SelfComposedDpEvent(GAUSS, 1000),
    de.ComposedDpEvent([GAUSS, de.SelfComposedDpEvent(de.LaplaceDpEvent(3.0), 7)]),
    de.PoissonSampledDpEvent(0.01, GAUSS),
    de.SampledWithReplacementDpEvent(source_dataset_size=10_000, sample_size=100, event=GAUSS),
    de.SampledWithoutReplacementDpEvent(source_dataset_size=10_000, sample_size=100, event=GAUSS),
    de.SingleEpochTreeAggregationDpEvent(noise_multiplier=2.0, step_counts=[10, 20]),
    de.SingleEpochTreeAggregationDpEvent(noise_multiplier=2.0, step_counts=16),
    de.RepeatAndSelectDpEvent(event=GAUSS, mean=3.0, shape=1.0),
    de.MixtureOfGaussiansDpEvent(
        standard_deviation=1.5, sensitivities=[0.0, 1.0], sampling_probs=[0.9, 0.1]
    ),
    de.TruncatedSubsampledGaussianDpEvent(
        dataset_size=60_000,
        sampling_probability=0.004,
        truncated_batch_size=300,
        noise_multiplier=1.0,
    ),
    de.SelfComposedDpEvent(
        de.ComposedDpEvent([de.PoissonSampledDpEvent(0.02, de.GaussianDpEvent(0.9)), GAUSS]), 3
    ),
]


def _oracle(value: Any) -> Any:
    """dp_accounting's named-tuple form, rewritten as our JSON: class_name -> type."""
    if hasattr(value, "_asdict") and hasattr(value, "class_name"):
        fields = value._asdict()
        out = {"type": fields.pop("class_name")}
        fields.pop("module_name")
        out.update({k: _oracle(v) for k, v in fields.items()})
        return out
    if isinstance(value, list | tuple):
        return [_oracle(v) for v in value]
    return value


def _rebuild(value: Any) -> Any:
    if isinstance(value, dict):
        fields = {k: _rebuild(v) for k, v in value.items() if k != "type"}
        return getattr(de, value["type"])(**fields)
    if isinstance(value, list):
        return [_rebuild(v) for v in value]
    return value


def test_every_event_type_of_dp_accounting_is_covered() -> None:
    known = {
        cls
        for _, cls in inspect.getmembers(de, inspect.isclass)
        if issubclass(cls, de.DpEvent) and cls is not de.DpEvent
    }
    assert known == {type(e) for e in EVENTS}


@pytest.mark.parametrize("event", EVENTS, ids=lambda e: type(e).__name__)
def test_json_matches_dp_accounting_and_rebuilds_the_event(event: de.DpEvent) -> None:
    ours = dp_event_to_dict(event)
    assert json.loads(json.dumps(ours, allow_nan=False)) == ours
    assert ours == _oracle(event.to_named_tuple())
    assert _rebuild(ours) == event


def test_numpy_values_become_plain_numbers() -> None:
    event = de.MixtureOfGaussiansDpEvent(
        standard_deviation=np.float64(1.5),
        sensitivities=np.array([0.0, 1.0]),
        sampling_probs=(np.float32(0.75), 0.25),
    )
    out = dp_event_to_dict(de.SelfComposedDpEvent(event, np.int64(4)))
    assert out == {
        "type": "SelfComposedDpEvent",
        "event": {
            "type": "MixtureOfGaussiansDpEvent",
            "standard_deviation": 1.5,
            "sensitivities": [0.0, 1.0],
            "sampling_probs": [0.75, 0.25],
        },
        "count": 4,
    }
    assert type(out["count"]) is int and type(out["event"]["standard_deviation"]) is float


def test_dataclass_events_are_written_the_same_way() -> None:
    @dataclasses.dataclass(frozen=True)
    class MyMechanismEvent:
        epsilon: float
        inner: Any

    assert dp_event_to_dict(MyMechanismEvent(0.5, GAUSS)) == {
        "type": "MyMechanismEvent",
        "epsilon": 0.5,
        "inner": {"type": "GaussianDpEvent", "noise_multiplier": 1.1},
    }


@pytest.mark.parametrize(
    ("event", "error", "match"),
    [
        (de.GaussianDpEvent(float("inf")), ValueError, r"GaussianDpEvent\.noise_multiplier: inf"),
        (
            de.ComposedDpEvent([GAUSS, de.LaplaceDpEvent(float("nan"))]),
            ValueError,
            r"events\[1\]\.noise_multiplier: nan",
        ),
        (object(), TypeError, "not a DpEvent"),
        (de.SelfComposedDpEvent(GAUSS, {1, 2}), TypeError, "set has no JSON form"),
    ],
)
def test_values_without_a_json_form_are_refused(event: Any, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        dp_event_to_dict(event)


def _step_by_step(steps: int) -> de.DpEvent:
    """A composition built as a pipeline builds it, one release at a time:
    ``event = ComposedDpEvent([event, step])``."""
    event: de.DpEvent = de.GaussianDpEvent(100.0)
    for i in range(steps):
        event = de.ComposedDpEvent([event, de.LaplaceDpEvent(100.0 + i)])
    return event


def _rdp(event: de.DpEvent) -> Any:
    acc = rdpa.RdpAccountant()
    acc.compose(event)
    return np.array(acc._rdp)  # noqa: SLF001 - the accountant's composed RDP vector


@pytest.mark.parametrize("steps", [20, 600])
def test_a_composition_built_step_by_step_is_one_flat_list(steps: int) -> None:
    """Audit 47: ``ComposedDpEvent([earlier, step])`` nests one level per step. Written as
    nested JSON, 16 steps already passed the server's depth limit (a 422, "dp_event nests 33
    levels deep"), and some 300 raised RecursionError here, where dp_accounting's own
    accountants compose it. Composition is associative: nested ComposedDpEvents are written as
    one, in order, and dp_accounting composes the rebuilt event to the same RDP curve."""
    event = _step_by_step(steps)
    ours = dp_event_to_dict(event)
    assert ours["type"] == "ComposedDpEvent" and len(ours["events"]) == steps + 1
    assert all(e["type"] != "ComposedDpEvent" for e in ours["events"])
    assert [e["noise_multiplier"] for e in ours["events"]] == [100.0] + [
        100.0 + i for i in range(steps)
    ]
    np.testing.assert_array_equal(_rdp(_rebuild(ours)), _rdp(event))


def test_a_composition_inside_another_event_is_flattened_too() -> None:
    inner = de.ComposedDpEvent([de.ComposedDpEvent([GAUSS, GAUSS]), de.LaplaceDpEvent(3.0)])
    ours = dp_event_to_dict(de.SelfComposedDpEvent(inner, 4))
    assert ours["event"]["events"] == [dp_event_to_dict(e) for e in (GAUSS, GAUSS)] + [
        dp_event_to_dict(de.LaplaceDpEvent(3.0))
    ]


def test_an_event_nested_too_deeply_is_a_value_error() -> None:
    """Nesting a composition cannot flatten (a SelfComposedDpEvent in a SelfComposedDpEvent
    ...) raised RecursionError past a few hundred levels: a ValueError saying how deep."""
    event: de.DpEvent = GAUSS
    for _ in range(2000):
        event = de.SelfComposedDpEvent(event, 1)
    with pytest.raises(ValueError, match="nests deeper than"):
        dp_event_to_dict(event)
