"""dp_accounting DpEvents translate into our mechanisms with the same privacy curve."""

from __future__ import annotations

import math

import numpy as np
import pytest
from dp_accounting import dp_event

from app.accounting.curve import compose
from app.accounting.mechanisms import mechanism_from_dict
from app.client import from_dp_event


def _curve(mechs: list[dict]):
    return compose([mechanism_from_dict(m).curve() for m in mechs])


def test_translations() -> None:
    assert from_dp_event(dp_event.GaussianDpEvent(2.0)) == [
        {"mechanism": "gaussian", "sigma": 2.0, "sensitivity": 1.0, "count": 1}
    ]
    assert from_dp_event(dp_event.LaplaceDpEvent(4.0))[0]["epsilon"] == 0.25
    rr = from_dp_event(
        dp_event.RandomizedResponseDpEvent(noise_parameter=3 / (math.e + 2), num_buckets=3)
    )[0]
    assert rr["k"] == 3 and rr["epsilon"] == pytest.approx(1.0)
    sgd = from_dp_event(
        dp_event.SelfComposedDpEvent(
            dp_event.PoissonSampledDpEvent(0.01, dp_event.GaussianDpEvent(1.1)), 500
        )
    )
    assert sgd == [  # as the server records it: 500 one-step entries merged (same curve)
        {
            "mechanism": "subsampled_gaussian",
            "sigma": 1.1,
            "sample_rate": 0.01,
            "steps": 1,
            "count": 500,
        }
    ]
    composed = dp_event.ComposedDpEvent(
        [
            dp_event.SelfComposedDpEvent(dp_event.GaussianDpEvent(3.0), 10),
            dp_event.LaplaceDpEvent(2.0),
        ]
    )
    assert [m["mechanism"] for m in from_dp_event(composed)] == ["gaussian", "laplace"]
    assert from_dp_event(composed)[0]["count"] == 10


def test_translated_curves_match_dp_accounting() -> None:
    from dp_accounting.rdp import rdp_privacy_accountant as rdpa

    from app.accounting.orders import ORDERS

    event = dp_event.ComposedDpEvent(
        [
            dp_event.SelfComposedDpEvent(dp_event.GaussianDpEvent(3.0), 10),
            dp_event.LaplaceDpEvent(5.0),
            dp_event.SelfComposedDpEvent(
                dp_event.PoissonSampledDpEvent(0.02, dp_event.GaussianDpEvent(1.2)), 100
            ),
        ]
    )
    orders = ORDERS[np.equal(np.floor(ORDERS), ORDERS) & (ORDERS <= 256)]
    acc = rdpa.RdpAccountant(orders=list(orders))
    acc.compose(event)
    ours = _curve(from_dp_event(event)).rdp[np.isin(ORDERS, orders)]
    np.testing.assert_allclose(ours, np.array(acc._rdp), rtol=1e-9)  # noqa: SLF001


@pytest.mark.parametrize(
    "event",
    [
        dp_event.NonPrivateDpEvent(),
        dp_event.UnsupportedDpEvent(),
        dp_event.PoissonSampledDpEvent(0.1, dp_event.LaplaceDpEvent(1.0)),
        dp_event.GaussianDpEvent(0.0),
        object(),
    ],
)
def test_untranslatable_events_are_refused(event) -> None:
    with pytest.raises(ValueError, match="translation|not differentially private"):
        from_dp_event(event)


@pytest.mark.parametrize(
    "event",
    [
        dp_event.ZCDpEvent(0.1),
        dp_event.DiscreteLaplaceDpEvent(0.5, 1),
        dp_event.SelfComposedDpEvent(
            dp_event.SelfComposedDpEvent(
                dp_event.PoissonSampledDpEvent(0.01, dp_event.GaussianDpEvent(1.1)), 3
            ),
            10,
        ),
        dp_event.PoissonSampledDpEvent(
            0.1, dp_event.ComposedDpEvent([dp_event.GaussianDpEvent(1.0)] * 2)
        ),
        dp_event.ComposedDpEvent(
            [
                dp_event.LaplaceDpEvent(4.0),
                dp_event.GaussianDpEvent(3.0),
                dp_event.LaplaceDpEvent(4.0),
            ]
        ),
    ],
)
def test_the_deprecated_translation_is_what_the_server_records(client, event) -> None:
    """Audit 43 F7: ``from_dp_event`` refused ZCDp and DiscreteLaplace events the server
    charges, and wrote a 30-step entry where the server records 30 one-step ones."""
    from privacy_ledger_client import dp_event_to_dict

    from tests.conftest import new_dataset

    ds = new_dataset(client, "deprecated", adaptive=False, budget={"epsilon": 50, "delta": 1e-6})
    r = client.post(
        f"/v1/datasets/{ds['id']}/charges/dp_event", json={"dp_event": dp_event_to_dict(event)}
    )
    assert r.status_code == 201, r.text
    recorded = [{k: v for k, v in e["mechanism"].items() if k != "v"} for e in r.json()["entries"]]
    assert from_dp_event(event) == recorded


@pytest.mark.parametrize(
    "event",
    [
        dp_event.SelfComposedDpEvent(dp_event.GaussianDpEvent(2.0), 0),
        dp_event.PoissonSampledDpEvent(0.0, dp_event.GaussianDpEvent(1.0)),
        dp_event.NoOpDpEvent(),
    ],
)
def test_an_event_that_costs_nothing_translates_to_nothing(event) -> None:
    """It was a ``count: 0`` gaussian and a ``sample_rate: 0`` entry, both refused (422) when
    charged."""
    assert from_dp_event(event) == []


def test_out_of_range_values_are_named_as_the_server_names_them() -> None:
    with pytest.raises(ValueError, match="LaplaceDpEvent: noise_multiplier -1.0 is negative"):
        from_dp_event(dp_event.LaplaceDpEvent(-1.0))
