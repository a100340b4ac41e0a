"""``POST /v1/datasets/{id}/charges/dp_event``: Poisson sampling over a composition of Gaussians
(dp_accounting's RDP accountant is the oracle), and errors that name the event's own field.

Audit 43, F2 and F3 (/work/notes/integrations43.md)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from dp_accounting import dp_event as de
from dp_accounting.rdp import rdp_privacy_accountant as rdpa
from fastapi.testclient import TestClient
from privacy_ledger_client import dp_event_to_dict

from app.accounting.curve import compose
from app.accounting.dp_events import translate
from app.accounting.kinds._spec import MIN_EPSILON
from app.accounting.orders import ORDERS
from tests.conftest import new_dataset


@pytest.fixture
def db_url(sqlite_url: str) -> str:
    """SQLite only (``client`` builds on it): what is tested here is the translation of
    DpEvents into mechanisms; their charges store entries as every other charge does, which
    tests/api run on both databases."""
    return sqlite_url


INTEGER_ORDERS = ORDERS[np.equal(np.floor(ORDERS), ORDERS) & (ORDERS <= 256)]
"""Orders where dp_accounting evaluates the subsampled Gaussian exactly (at fractional ones it
sums absolute values of a series, an upper bound on ours)."""

POISSON_OVER_GAUSSIANS = {
    "composed": de.PoissonSampledDpEvent(
        0.1, de.ComposedDpEvent([de.GaussianDpEvent(1.0), de.GaussianDpEvent(2.0)])
    ),
    "self-composed": de.SelfComposedDpEvent(
        de.PoissonSampledDpEvent(0.01, de.SelfComposedDpEvent(de.GaussianDpEvent(1.0), 2)), 1000
    ),
    "nested": de.SelfComposedDpEvent(
        de.PoissonSampledDpEvent(
            0.05,
            de.ComposedDpEvent(
                [
                    de.SelfComposedDpEvent(de.GaussianDpEvent(3.0), 3),
                    de.ComposedDpEvent([de.GaussianDpEvent(2.5), de.GaussianDpEvent(4.0)]),
                ]
            ),
        ),
        200,
    ),
    "beside-others": de.ComposedDpEvent(
        [
            de.PoissonSampledDpEvent(
                0.02, de.ComposedDpEvent([de.GaussianDpEvent(1.5), de.GaussianDpEvent(1.5)])
            ),
            de.LaplaceDpEvent(10.0),
        ]
    ),
}


def _post(client: TestClient, dataset: str, event: Any, **params: str) -> Any:
    return client.post(
        f"/v1/datasets/{dataset}/charges/dp_event",
        json={"dp_event": event if isinstance(event, dict) else dp_event_to_dict(event)},
        params=params,
    )


@pytest.mark.parametrize("name", sorted(POISSON_OVER_GAUSSIANS))
def test_poisson_over_gaussians_is_dp_accountings_effective_gaussian(name: str) -> None:
    """The translated curve is dp_accounting's RDP at every integer order, and its epsilon
    (dp_accounting's own conversion over those orders) is dp_accounting's, never below."""
    event = POISSON_OVER_GAUSSIANS[name]
    acc = rdpa.RdpAccountant(orders=list(INTEGER_ORDERS))
    acc.compose(event)
    theirs = np.array(acc._rdp)  # noqa: SLF001 - the accountant's composed RDP vector
    ours = compose([m.curve() for m in translate(dp_event_to_dict(event))]).rdp[
        np.isin(ORDERS, INTEGER_ORDERS)
    ]
    assert (ours >= theirs * (1 - 1e-9)).all()
    np.testing.assert_allclose(ours, theirs, rtol=1e-9)
    for delta in (1e-5, 1e-7):
        eps_ours, _ = rdpa.compute_epsilon(list(INTEGER_ORDERS), list(ours), delta)
        eps_theirs = acc.get_epsilon(delta)
        assert eps_ours >= eps_theirs or eps_ours == pytest.approx(eps_theirs, rel=1e-9)


def test_the_charge_is_one_subsampled_gaussian_at_the_effective_noise(client: TestClient) -> None:
    """What is recorded: one subsampled Gaussian per Poisson event, with dp_accounting's
    effective noise multiplier (never above it: a smaller noise can only charge more)."""
    ds = new_dataset(client, "effective", adaptive=False, budget={"epsilon": 10, "delta": 1e-6})
    event = POISSON_OVER_GAUSSIANS["self-composed"]
    r = _post(client, ds["id"], event)
    assert r.status_code == 201, r.text
    (entry,) = r.json()["entries"]
    m = entry["mechanism"]
    assert m["mechanism"] == "subsampled_gaussian"
    assert m["sample_rate"] == event.event.sampling_probability
    assert m["steps"] * m["count"] == event.count
    expected = rdpa._effective_gaussian_noise_multiplier(event.event.event)  # noqa: SLF001
    assert m["sigma"] <= expected
    assert m["sigma"] == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(
    ("event", "offender"),
    [
        (
            de.PoissonSampledDpEvent(
                0.1, de.ComposedDpEvent([de.GaussianDpEvent(1.0), de.LaplaceDpEvent(2.0)])
            ),
            "LaplaceDpEvent",
        ),
        (
            de.PoissonSampledDpEvent(
                0.1, de.SelfComposedDpEvent(de.ComposedDpEvent([de.NoOpDpEvent()]), 3)
            ),
            "NoOpDpEvent",
        ),
        (
            de.PoissonSampledDpEvent(
                0.1,
                de.ComposedDpEvent(
                    [
                        de.GaussianDpEvent(1.0),
                        de.PoissonSampledDpEvent(0.5, de.GaussianDpEvent(1.0)),
                    ]
                ),
            ),
            "PoissonSampledDpEvent",
        ),
    ],
)
def test_poisson_over_a_mix_with_a_non_gaussian_is_refused(
    client: TestClient, event: Any, offender: str
) -> None:
    """dp_accounting refuses these too (its RDP accountant: "Subevent of PoissonSampledDpEvent
    must be a GaussianDpEvent or a nested structure ..."): nothing is charged."""
    acc = rdpa.RdpAccountant()
    assert not acc.supports(event)
    ds = new_dataset(client, f"mix-{offender}", adaptive=False)
    r = _post(client, ds["id"], event)
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert f"over a composition holding {offender}" in detail
    assert "only GaussianDpEvents" in detail
    assert client.get(f"/v1/datasets/{ds['id']}/budget").json()["entries"] == 0


BELOW = f"below the smallest accepted epsilon {MIN_EPSILON:g}"


@pytest.mark.parametrize(
    ("event", "says"),
    [
        (de.GaussianDpEvent(-1.0), ["GaussianDpEvent", "noise_multiplier -1.0 is negative"]),
        (de.LaplaceDpEvent(-1.0), ["LaplaceDpEvent", "noise_multiplier -1.0 is negative"]),
        (de.LaplaceDpEvent(1e-3), ["LaplaceDpEvent", "noise_multiplier 0.001", "epsilon 1000"]),
        (de.LaplaceDpEvent(1e10), ["LaplaceDpEvent", "noise_multiplier 1", BELOW, "pure_dp"]),
        (
            de.RandomizedResponseDpEvent(1e-50, 2),
            ["RandomizedResponseDpEvent", "noise_parameter 1e-50", "above the largest"],
        ),
        (
            de.RandomizedResponseDpEvent(1 - 1e-12, 2),
            ["RandomizedResponseDpEvent", "noise_parameter 0.999999999999", BELOW],
        ),
        (de.GaussianDpEvent(1e-9), ["GaussianDpEvent", "noise_multiplier 1e-09", "below"]),
        (de.DiscreteLaplaceDpEvent(-0.5, 1), ["DiscreteLaplaceDpEvent", "noise_parameter -0.5"]),
        (de.ZCDpEvent(-0.1), ["ZCDpEvent", "rho -0.1 is negative"]),
        (
            de.SelfComposedDpEvent(de.PoissonSampledDpEvent(1.5, de.GaussianDpEvent(1.0)), 3),
            ["PoissonSampledDpEvent at event", "sampling_probability 1.5 is above 1"],
        ),
        (
            de.PoissonSampledDpEvent(0.1, de.GaussianDpEvent(-2.0)),
            ["PoissonSampledDpEvent", "noise_multiplier -2.0 is negative"],
        ),
        (
            de.ComposedDpEvent([de.GaussianDpEvent(5.0), de.LaplaceDpEvent(-3.0)]),
            ["LaplaceDpEvent at events[1]", "noise_multiplier -3.0 is negative"],
        ),
    ],
)
def test_out_of_range_errors_name_the_event_its_field_and_value(
    client: TestClient, event: Any, says: list[str]
) -> None:
    ds = new_dataset(client, "ranges", adaptive=False)
    r = _post(client, ds["id"], event)
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    for part in says:
        assert part in detail, detail
    assert "must be in [" not in detail  # (the ledger field's message, which named no event)
    assert client.get(f"/v1/datasets/{ds['id']}/budget").json()["entries"] == 0


def test_a_non_finite_noise_in_raw_json_is_named(client: TestClient) -> None:
    """JSON has no infinity, but Python's parser reads ``Infinity``: it was charged as if it
    were epsilon 0 ("epsilon must be in [1e-09, 100], got 0.0")."""
    ds = new_dataset(client, "infinite", adaptive=False)
    r = client.post(
        f"/v1/datasets/{ds['id']}/charges/dp_event",
        content='{"dp_event": {"type": "LaplaceDpEvent", "noise_multiplier": Infinity}}',
        headers={"Content-Type": "application/json"},
    )
    assert r.status_code == 422, r.text
    assert "epsilon must be in" not in r.json()["detail"]


def test_the_problem_says_where_in_the_event(client: TestClient) -> None:
    ds = new_dataset(client, "where", adaptive=False)
    event = de.ComposedDpEvent(
        [
            de.SelfComposedDpEvent(de.PoissonSampledDpEvent(0.01, de.GaussianDpEvent(1.0)), 10),
            de.SelfComposedDpEvent(de.PoissonSampledDpEvent(0.01, de.GaussianDpEvent(1e-4)), 10),
        ]
    )
    r = _post(client, ds["id"], event)
    assert r.status_code == 422
    assert r.json()["event_path"] == "events[1].event"
    # and a dry run refuses it the same way
    assert _post(client, ds["id"], event, dry_run="true").json()["event_path"] == "events[1].event"


def test_an_event_that_charges_nothing_says_which_parts_cost_nothing(client: TestClient) -> None:
    """An Opacus history whose only entry samples nobody sent no NoOpDpEvent and no count 0."""
    ds = new_dataset(client, "nothing", adaptive=False)
    event = de.SelfComposedDpEvent(de.PoissonSampledDpEvent(0.0, de.GaussianDpEvent(1.0)), 10)
    r = _post(client, ds["id"], event)
    assert r.status_code == 422
    assert "sampling_probability 0" in r.json()["detail"]


@pytest.mark.parametrize("accounting", ["rdp", "pld"])
@pytest.mark.parametrize("q", [5e-324, 1e-310])
def test_a_subnormal_sampling_probability_is_refused_as_a_direct_charge_is(
    client: TestClient, accounting: str, q: float
) -> None:
    """A direct ``subsampled_gaussian`` charge refuses a sample rate below the smallest normal
    float; through a PoissonSampledDpEvent it was recorded on an rdp dataset (an entry the API
    refuses to take) and on a pld one answered dp_accounting's own "a must be greater than b.
    Got a=inf and b=inf." Both are a 422 naming the event and its field now."""
    ds = new_dataset(client, f"subnormal-{accounting}", adaptive=False, accounting=accounting)
    direct = client.post(
        f"/v1/datasets/{ds['id']}/charges",
        json={"mechanism": {"mechanism": "subsampled_gaussian", "sigma": 1.0, "sample_rate": q}},
    )
    assert direct.status_code == 422, direct.text
    event = de.SelfComposedDpEvent(de.PoissonSampledDpEvent(q, de.GaussianDpEvent(1.0)), 3)
    r = _post(client, ds["id"], event)
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert "PoissonSampledDpEvent at event" in detail
    assert f"sampling_probability {q!r}" in detail
    assert "smallest normal float" in detail
    assert r.json()["event_path"] == "event"
    assert client.get(f"/v1/datasets/{ds['id']}/budget").json()["entries"] == 0


HUGE = "1" + "0" * 400
"""An integer beyond the float range: Python's JSON parser reads it exactly, and ``float()`` of
it raises OverflowError."""


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (f'{{"type": "GaussianDpEvent", "noise_multiplier": {HUGE}}}', "noise_multiplier"),
        (f'{{"type": "GaussianDpEvent", "noise_multiplier": -{HUGE}}}', "noise_multiplier"),
        (f'{{"type": "LaplaceDpEvent", "noise_multiplier": {HUGE}}}', "noise_multiplier"),
        (
            f'{{"type": "RandomizedResponseDpEvent", "noise_parameter": 0.5, "num_buckets": {HUGE}}}',
            "num_buckets",
        ),
        (
            f'{{"type": "DiscreteLaplaceDpEvent", "noise_parameter": 0.5, "sensitivity": {HUGE}}}',
            "sensitivity",
        ),
        (f'{{"type": "ZCDpEvent", "rho": {HUGE}}}', "rho"),
        (f'{{"type": "ZCDpEvent", "rho": 0.1, "xi": {HUGE}}}', "xi"),
        (f'{{"type": "EpsilonDeltaDpEvent", "epsilon": {HUGE}, "delta": 0}}', "epsilon"),
        (
            f'{{"type": "PoissonSampledDpEvent", "sampling_probability": {HUGE}, '
            '"event": {"type": "GaussianDpEvent", "noise_multiplier": 1}}',
            "sampling_probability",
        ),
        (
            '{"type": "PoissonSampledDpEvent", "sampling_probability": 0.1, '
            f'"event": {{"type": "GaussianDpEvent", "noise_multiplier": {HUGE}}}}}',
            "noise_multiplier",
        ),
        (
            '{"type": "PoissonSampledDpEvent", "sampling_probability": 0.1, "event": '
            '{"type": "ComposedDpEvent", "events": '
            f'[{{"type": "GaussianDpEvent", "noise_multiplier": {HUGE}}}]}}}}',
            "noise_multiplier",
        ),
    ],
)
def test_an_integer_beyond_the_float_range_is_a_422_naming_its_field(
    client: TestClient, raw: str, says: str
) -> None:
    """Audit 47: ``float()`` of such an integer raised OverflowError in the event checks, a 500
    ("an unexpected error occurred") where every other out-of-range value is a 422 naming the
    event and its field."""
    ds = new_dataset(client, "huge-int", adaptive=False)
    for dry in ("false", "true"):
        r = client.post(
            f"/v1/datasets/{ds['id']}/charges/dp_event",
            content='{"dp_event": ' + raw + "}",
            headers={"Content-Type": "application/json"},
            params={"dry_run": dry},
        )
        assert r.status_code == 422, r.text
        detail = r.json()["detail"]
        assert says in detail and "not finite" in detail, detail
    assert client.get(f"/v1/datasets/{ds['id']}/budget").json()["entries"] == 0


def test_a_huge_noise_under_a_sampling_probability_of_0_charges_nothing(
    client: TestClient,
) -> None:
    """The translation read the Gaussian's noise before seeing that nothing is sampled: the same
    OverflowError (audit 47). Nothing sampled is nothing charged, as with any other noise."""
    ds = new_dataset(client, "huge-int-q0", adaptive=False)
    raw = (
        '{"type": "PoissonSampledDpEvent", "sampling_probability": 0.0, '
        f'"event": {{"type": "GaussianDpEvent", "noise_multiplier": {HUGE}}}}}'
    )
    r = client.post(
        f"/v1/datasets/{ds['id']}/charges/dp_event",
        content='{"dp_event": ' + raw + "}",
        headers={"Content-Type": "application/json"},
    )
    assert r.status_code == 422, r.text
    assert "charges nothing" in r.json()["detail"]


def test_refusals_for_blocks_and_allocations_do_not_ask_for_fields_a_dp_event_lacks(
    client: TestClient,
) -> None:
    """A dp_event charge names no blocks and no allocation (its body has neither field: sending
    one is a 422), so it is refused on a partitioned dataset and for an allocation-limited key.
    The refusals were the plain charge's: "give the blocks the charge reads, 'blocks': ..." and
    "name one of them in 'allocation'", advice the caller cannot follow (audit 47). They now
    say that a dp_event charge cannot, and what can: a charge of each mechanism."""
    event = {"type": "LaplaceDpEvent", "noise_multiplier": 100.0}
    part = new_dataset(client, "by-day", partition={"unit": "day"})
    body: dict[str, Any] = {"dp_event": event}
    r = client.post(
        f"/v1/datasets/{part['id']}/charges/dp_event",
        json={**body, "blocks": {"from": "2026-11-20", "to": "2026-11-20"}},
    )
    assert r.status_code == 422  # (the advice could not be followed)
    for dry in ("false", "true"):
        r = client.post(
            f"/v1/datasets/{part['id']}/charges/dp_event", json=body, params={"dry_run": dry}
        )
        assert r.status_code == 422, r.text
        detail = r.json()["detail"]
        assert "partitioned by day" in detail and "dp_event charge names no blocks" in detail
        assert "give the blocks" not in detail
        assert "/charges" in detail
    ds = new_dataset(client, "teams", budget={"epsilon": 2.0, "delta": 1e-6})
    r = client.post(
        f"/v1/datasets/{ds['id']}/allocations",
        json={"name": "team-a", "budget": {"epsilon": 1.0, "delta": 1e-6}},
    )
    assert r.status_code == 201, r.text
    key = client.post("/v1/keys", json={"role": "pipeline", "allocations": ["team-a"]}).json()
    headers = {"Authorization": f"Bearer {key['key']}"}
    r = client.post(
        f"/v1/datasets/{ds['id']}/charges/dp_event",
        json={**body, "allocation": "team-a"},
        headers=headers,
    )
    assert r.status_code == 422  # (the advice could not be followed)
    r = client.post(f"/v1/datasets/{ds['id']}/charges/dp_event", json=body, headers=headers)
    assert r.status_code == 403, r.text
    detail = r.json()["detail"]
    assert "limited to allocations" in detail and "dp_event charge names no allocation" in detail
    assert "name one of them in 'allocation'" not in detail
    for d in (part, ds):
        assert client.get(f"/v1/datasets/{d['id']}/budget").json()["entries"] == 0


def test_a_composition_built_step_by_step_is_charged(client: TestClient) -> None:
    """``event = ComposedDpEvent([event, step])`` for 20 steps: dp_accounting composes it, and
    the server refused it ("dp_event nests 41 levels deep; the limit is 32") as the client
    wrote it nested (audit 47). Written flat, it is charged; its spend is never above
    dp_accounting's RDP accountant on the nested event (invariant 5)."""
    event: Any = de.GaussianDpEvent(100.0)
    for i in range(20):
        event = de.ComposedDpEvent([event, de.LaplaceDpEvent(100.0 + i)])
    ds = new_dataset(client, "step-by-step", adaptive=False)
    r = _post(client, ds["id"], event)
    assert r.status_code == 201, r.text
    assert len(r.json()["entries"]) == 21
    acc = rdpa.RdpAccountant()
    acc.compose(event)
    spent = r.json()["spent"]
    assert spent["epsilon"] <= acc.get_epsilon(spent["delta"]) * (1 + 1e-12)
