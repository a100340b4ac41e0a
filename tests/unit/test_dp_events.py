"""dp_accounting events, serialised generically to JSON dicts, translate into mechanisms whose
curves are dp_accounting's own (its RdpAccountant is the oracle); anything without a meaning
here is refused with its type named."""

from __future__ import annotations

import json
import math

import attr
import mpmath
import numpy as np
import pytest
from dp_accounting import dp_event
from dp_accounting.rdp import rdp_privacy_accountant as rdpa

from app.accounting.curve import compose
from app.accounting.orders import DPACC_DEFAULT_ORDERS, ORDERS
from app.accounting.registry import dp_event_types, mechanisms_from_dp_event

IDX = np.array([int(np.flatnonzero(ORDERS == a)[0]) for a in DPACC_DEFAULT_ORDERS])
INTEGER = np.equal(np.floor(DPACC_DEFAULT_ORDERS), DPACC_DEFAULT_ORDERS)


def as_dict(event: object) -> object:
    """A DpEvent as a client would send it: ``{"type": class name, **fields}``, recursively,
    through JSON (no dp_accounting type reaches the translation)."""

    def walk(value: object) -> object:
        if attr.has(type(value)):
            fields = {f.name: walk(getattr(value, f.name)) for f in attr.fields(type(value))}
            return {"type": type(value).__name__, **fields}
        if isinstance(value, list | tuple):
            return [walk(v) for v in value]
        return value

    return json.loads(json.dumps(walk(event)))


def _dpacc_rdp(event: dp_event.DpEvent, relation=rdpa.NeighborRel.ADD_OR_REMOVE_ONE):
    acc = rdpa.RdpAccountant(neighboring_relation=relation)
    acc.compose(event)
    return np.array(acc._rdp)  # noqa: SLF001 - the accountant's composed RDP vector


def _ours(event: dp_event.DpEvent):
    return compose([m.curve() for m in mechanisms_from_dp_event(as_dict(event))])


EVENTS = {
    "gaussian": dp_event.GaussianDpEvent(2.5),
    "laplace": dp_event.LaplaceDpEvent(4.0),
    "self-composed": dp_event.SelfComposedDpEvent(dp_event.GaussianDpEvent(10.0), 30),
    "composed": dp_event.ComposedDpEvent(
        [
            dp_event.SelfComposedDpEvent(dp_event.GaussianDpEvent(3.0), 10),
            dp_event.LaplaceDpEvent(2.0),
            dp_event.NoOpDpEvent(),
            dp_event.SelfComposedDpEvent(dp_event.LaplaceDpEvent(8.0), 0),
        ]
    ),
    "dp-sgd": dp_event.SelfComposedDpEvent(
        dp_event.PoissonSampledDpEvent(0.01, dp_event.GaussianDpEvent(1.1)), 500
    ),
}


@pytest.mark.parametrize("name", sorted(EVENTS))
def test_curves_match_dp_accounting(name: str) -> None:
    event = EVENTS[name]
    ours = _ours(event).rdp[IDX]
    theirs = _dpacc_rdp(event)
    if name == "dp-sgd":
        # dp_accounting sums absolute values of the fractional series (an upper bound on ours)
        np.testing.assert_allclose(ours[INTEGER], theirs[INTEGER], rtol=1e-9)
        assert (ours[~INTEGER] <= theirs[~INTEGER] * (1 + 1e-12)).all()
    else:
        np.testing.assert_allclose(ours, theirs, rtol=1e-12)


def test_randomized_response_under_replace_one() -> None:
    event = dp_event.SelfComposedDpEvent(
        dp_event.RandomizedResponseDpEvent(noise_parameter=3 / (math.e + 2), num_buckets=3), 4
    )
    (m,) = mechanisms_from_dp_event(as_dict(event))
    assert m.kind == "randomized_response" and m.k == 3 and m.count == 4
    assert m.epsilon == pytest.approx(1.0, rel=1e-14)
    theirs = _dpacc_rdp(event, rdpa.NeighborRel.REPLACE_ONE)
    np.testing.assert_allclose(_ours(event).rdp[IDX], theirs, rtol=1e-9)
    uniform = dp_event.RandomizedResponseDpEvent(noise_parameter=1.0, num_buckets=5)
    assert mechanisms_from_dp_event(as_dict(uniform)) == []


def test_translations_keep_the_parameters() -> None:
    (g,) = mechanisms_from_dp_event(as_dict(dp_event.GaussianDpEvent(2.0)))
    assert g.to_dict() == {"mechanism": "gaussian", "sigma": 2.0, "sensitivity": 1.0, "count": 1}
    (sgd,) = mechanisms_from_dp_event(as_dict(EVENTS["dp-sgd"]))
    assert (sgd.kind, sgd.sigma, sgd.sample_rate, sgd.repetitions()) == (
        "subsampled_gaussian",
        1.1,
        0.01,
        500,
    )
    assert [m.kind for m in mechanisms_from_dp_event(as_dict(EVENTS["composed"]))] == [
        "gaussian",
        "laplace",
    ]
    (dl,) = mechanisms_from_dp_event(
        {"type": "DiscreteLaplaceDpEvent", "noise_parameter": 0.5, "sensitivity": 2}
    )
    assert (dl.kind, dl.epsilon, dl.sensitivity) == ("discrete_laplace", 1.0, 2)
    assert (
        mechanisms_from_dp_event(
            {
                "type": "PoissonSampledDpEvent",
                "sampling_probability": 0.0,
                "event": as_dict(dp_event.GaussianDpEvent(1.0)),
            }
        )
        == []
    )


@pytest.mark.parametrize(
    ("event", "message"),
    [
        (dp_event.NonPrivateDpEvent(), "NonPrivateDpEvent has no translation"),
        (dp_event.UnsupportedDpEvent(), "UnsupportedDpEvent has no translation"),
        (
            dp_event.SampledWithoutReplacementDpEvent(1000, 10, dp_event.GaussianDpEvent(1.0)),
            "SampledWithoutReplacementDpEvent has no translation",
        ),
        (
            dp_event.PoissonSampledDpEvent(0.1, dp_event.LaplaceDpEvent(1.0)),
            "PoissonSampledDpEvent over LaplaceDpEvent has no translation",
        ),
        (
            dp_event.ComposedDpEvent([dp_event.GaussianDpEvent(1.0), dp_event.NonPrivateDpEvent()]),
            "NonPrivateDpEvent has no translation",
        ),
        (dp_event.GaussianDpEvent(0.0), "not differentially private"),
        (dp_event.LaplaceDpEvent(0.0), "not differentially private"),
        (dp_event.RandomizedResponseDpEvent(0.0, 2), "no translation"),
    ],
)
def test_events_without_a_meaning_here_are_refused_by_name(event, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        mechanisms_from_dp_event(as_dict(event))


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"type": "Nope"}, "Nope has no translation"),
        ({}, "None has no translation"),
        ([1, 2], "must be a JSON object"),
        ({"type": "GaussianDpEvent"}, "noise_multiplier"),
        ({"type": "GaussianDpEvent", "noise_multiplier": "2"}, "noise_multiplier"),
        ({"type": "ComposedDpEvent", "events": "x"}, "list 'events'"),
        ({"type": "SelfComposedDpEvent", "count": -1, "event": {}}, "count must be"),
        ({"type": "SelfComposedDpEvent", "count": 2, "event": None}, "JSON object"),
    ],
)
def test_malformed_dicts_are_value_errors(data, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        mechanisms_from_dp_event(data)


def test_nesting_is_bounded() -> None:
    event: dict = {"type": "GaussianDpEvent", "noise_multiplier": 1.0}
    for _ in range(40):
        event = {"type": "SelfComposedDpEvent", "count": 1, "event": event}
    with pytest.raises(ValueError, match="nested deeper"):
        mechanisms_from_dp_event(event)


def test_every_translated_type_is_listed() -> None:
    assert {"GaussianDpEvent", "LaplaceDpEvent", "PoissonSampledDpEvent"} <= set(dp_event_types())


@pytest.mark.parametrize(
    "event",
    [
        {"type": "GaussianDpEvent", "noise_multiplier": 2.0, "sensitivity": 10},
        {"type": "ZCDpEvent", "rho": 0.1, "delta": 1e-3},
        {"type": "LaplaceDpEvent", "noise_multiplier": 2.0, "scale": 5.0},
        {"type": "ComposedDpEvent", "events": [], "event": {"type": "GaussianDpEvent"}},
        {"type": "SelfComposedDpEvent", "event": {"type": "NoOpDpEvent"}, "count": 2, "steps": 9},
        {"type": "NoOpDpEvent", "epsilon": 1.0},
        {
            "type": "PoissonSampledDpEvent",
            "sampling_probability": 0.01,
            "event": {"type": "GaussianDpEvent", "noise_multiplier": 1.0, "sensitivity": 3},
        },
        {
            "type": "ComposedDpEvent",
            "events": [{"type": "EpsilonDeltaDpEvent", "epsilon": 1.0, "delta": 1e-6, "x": 0}],
        },
    ],
)
def test_an_event_with_a_field_no_translation_reads_is_refused(event: dict) -> None:
    """A hand-written GaussianDpEvent with a sensitivity of 10 was charged at sensitivity 1
    (epsilon 1.99 at 1e-5 instead of 33.1): every field must be one a translation reads (a
    helper's search of the integrations)."""
    with pytest.raises(ValueError, match="unknown field"):
        mechanisms_from_dp_event(event)


EXACT_EPSILON = {
    # (event, the epsilon its fields give, in exact arithmetic: every float is a dyadic rational)
    "rr k=2, p near 1": (
        dp_event.RandomizedResponseDpEvent(noise_parameter=0.9999999971245752, num_buckets=2),
        lambda: mpmath.log(2 / mpmath.mpf(0.9999999971245752) - 1),
    ),
    "rr k=10, p near 1": (
        dp_event.RandomizedResponseDpEvent(noise_parameter=0.9999999669699988, num_buckets=10),
        lambda: mpmath.log(10 / mpmath.mpf(0.9999999669699988) - 9),
    ),
    "rr k=3": (
        dp_event.RandomizedResponseDpEvent(noise_parameter=0.75, num_buckets=3),
        lambda: mpmath.log(3 / mpmath.mpf(0.75) - 2),
    ),
    "laplace 3": (dp_event.LaplaceDpEvent(3.0), lambda: 1 / mpmath.mpf(3)),
    "laplace 7": (dp_event.LaplaceDpEvent(7.0), lambda: 1 / mpmath.mpf(7)),
    "discrete laplace 0.3 x 3": (
        dp_event.DiscreteLaplaceDpEvent(0.3, 3),
        lambda: mpmath.mpf(0.3) * 3,
    ),
    "discrete laplace 1.3 x 7": (
        dp_event.DiscreteLaplaceDpEvent(1.3, 7),
        lambda: mpmath.mpf(1.3) * 7,
    ),
}


@pytest.mark.parametrize("name", sorted(EXACT_EPSILON))
def test_an_epsilon_derived_from_event_fields_is_never_rounded_down(name: str) -> None:
    """The epsilon a translation computes from the event's fields (RR: log(k / p - k + 1), which
    lost up to ~3e-9 of itself to cancellation for p near 1; Laplace: 1 / nm; discrete Laplace:
    a * sensitivity, each half an ulp low as often as not) is at least the exact value (mpmath,
    60 digits), and within a few ulps of it."""
    event, exact = EXACT_EPSILON[name]
    (m,) = mechanisms_from_dp_event(as_dict(event))
    with mpmath.workdps(60):
        want = exact()
        assert mpmath.mpf(m.epsilon) >= want
        assert mpmath.mpf(m.epsilon) <= want * (1 + mpmath.mpf(2) ** -48)


@pytest.mark.parametrize(("k", "epsilon"), [(7, 0.3), (10, 1.0), (100, 1.0), (1000, 3.0)])
def test_many_bucket_randomized_response_is_never_below_dp_accounting(
    k: int, epsilon: float
) -> None:
    """k >= 7 is where the KL value stops being a valid rho (docs/formulas.md §1.5); composed
    with a ZCDpEvent and self-composed, the translated RDP curve is dp_accounting's REPLACE_ONE
    curve at every one of its orders (never below it), and the rho carried beside it at least
    the largest eps(alpha) / alpha dp_accounting's curve shows."""
    p = k / (math.exp(epsilon) + k - 1)
    rr = dp_event.RandomizedResponseDpEvent(noise_parameter=p, num_buckets=k)
    event = dp_event.SelfComposedDpEvent(
        dp_event.ComposedDpEvent([rr, dp_event.ZCDpEvent(0.01)]), 5
    )
    ours = _ours(event)
    theirs = _dpacc_rdp(event, rdpa.NeighborRel.REPLACE_ONE)
    assert (ours.rdp[IDX] >= theirs * (1 - 1e-12)).all()
    np.testing.assert_allclose(ours.rdp[IDX], theirs, rtol=1e-9)
    rr_only = _dpacc_rdp(rr, rdpa.NeighborRel.REPLACE_ONE)
    assert ours.rho >= 5 * (max(rr_only / np.array(DPACC_DEFAULT_ORDERS)) + 0.01) * (1 - 1e-12)
