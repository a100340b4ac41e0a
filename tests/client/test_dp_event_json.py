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
