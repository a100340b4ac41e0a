"""Issue 12 integrations through the client against a live server (SQLite and PostgreSQL): a
dp_accounting DpEvent, an Opacus history and an OpenDP measurement, each charged in one call.

Oracles: the server's own translation is checked against dp_accounting in
tests/client/test_dp_event_interop.py; here the entries recorded are compared with the mechanisms
built independently from the same parameters, and spends with the accounting core's filter.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from typing import Any

import opendp.prelude as dp
import pytest
from dp_accounting import dp_event as de
from privacy_ledger_client import (
    AsyncLedgerClient,
    BudgetExceeded,
    InvalidRequest,
    LedgerClient,
    approx_dp,
    dp_event_to_dict,
    opacus_dp_event,
    opendp_mechanism,
    pure_dp,
    subsampled_gaussian,
    zcdp,
)

from app.accounting.filters import Budget, Filter, FilterKind
from app.accounting.mechanisms import mechanism_from_dict
from app.accounting.registry import dp_event_types
from tests.conftest import ADMIN_KEY
from tests.live import running

dp.enable_features("contrib")
FLOATS = (dp.atom_domain(T=float, nan=False), dp.absolute_distance(T=float))


@pytest.fixture(scope="module")
def server_url(module_db_url: str) -> Iterator[str]:
    """One server per backend for the module's tests (each makes datasets of its own names)."""
    with running(module_db_url, ADMIN_KEY) as server:
        yield server.url


def _stored(entry: Any) -> dict[str, Any]:
    return {k: v for k, v in entry.mechanism.items() if k != "v"}


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return mechanism_from_dict(a) == mechanism_from_dict(b)


# --- offline: the translations -----------------------------------------------------------------


def test_opacus_history_is_one_composed_event() -> None:
    history = [(1.1, 0.01, 500), (0.9, 0.02, 100)]
    event = opacus_dp_event(history)
    rebuilt = de.ComposedDpEvent(
        [
            de.SelfComposedDpEvent(de.PoissonSampledDpEvent(q, de.GaussianDpEvent(nm)), steps)
            for nm, q, steps in history
        ]
    )
    assert event == dp_event_to_dict(rebuilt)  # what dp_accounting itself would send
    for bad in ([], [(1.0, 0.01)], [(1.0, 0.01, 1.5)], [(float("nan"), 0.01, 3)], [(1, "q", 3)]):
        with pytest.raises(ValueError):
            opacus_dp_event(bad)


def test_opendp_measures_map_to_generic_kinds() -> None:
    lap = dp.m.make_laplace(*FLOATS, scale=2.0)
    assert opendp_mechanism(lap, 1.0) == pure_dp(lap.map(1.0))
    gauss = dp.m.make_gaussian(*FLOATS, scale=2.0)
    assert opendp_mechanism(gauss, 1.0) == zcdp(gauss.map(1.0))
    fixed = dp.c.make_fix_delta(dp.c.make_zCDP_to_approxDP(gauss), 1e-7)
    eps, delta = fixed.map(1.0)
    assert opendp_mechanism(fixed, 1.0) == approx_dp(eps, delta)
    approx_pure = dp.c.make_approximate(lap)
    assert opendp_mechanism(approx_pure, 1.0) == pure_dp(lap.map(1.0))
    profile = dp.c.make_zCDP_to_approxDP(gauss)
    with pytest.raises(ValueError, match="SmoothedMaxDivergence"):
        opendp_mechanism(profile, 1.0)


# --- live ----------------------------------------------------------------------------------


LEAVES: dict[str, dict[str, Any]] = {
    "GaussianDpEvent": {"type": "GaussianDpEvent", "noise_multiplier": 5.0},
    "LaplaceDpEvent": {"type": "LaplaceDpEvent", "noise_multiplier": 20.0},
    "RandomizedResponseDpEvent": dp_event_to_dict(
        de.RandomizedResponseDpEvent(noise_parameter=0.9, num_buckets=3)
    ),
    "DiscreteLaplaceDpEvent": dp_event_to_dict(
        de.DiscreteLaplaceDpEvent(noise_parameter=0.05, sensitivity=1)
    ),
    "PoissonSampledDpEvent": dp_event_to_dict(
        de.PoissonSampledDpEvent(0.01, de.GaussianDpEvent(2.0))
    ),
    "ZCDpEvent": dp_event_to_dict(de.ZCDpEvent(rho=0.001)),
    # dp_accounting 0.6 has no EpsilonDeltaDpEvent class yet; its JSON form is the same
    "EpsilonDeltaDpEvent": {"type": "EpsilonDeltaDpEvent", "epsilon": 0.05, "delta": 1e-9},
}


def test_every_listed_dp_event_type_is_charged(server_url: str) -> None:
    listed = set(dp_event_types()) - {"ComposedDpEvent", "SelfComposedDpEvent", "NoOpDpEvent"}
    assert listed == set(LEAVES)
    with LedgerClient(server_url, ADMIN_KEY) as c:
        ds = c.create_dataset("events", 5.0, 1e-6, adaptive=False)
        for name, leaf in LEAVES.items():
            event = {"type": "SelfComposedDpEvent", "event": leaf, "count": 2}
            batch = c.charge_dp_event(ds.id, event, label=name)
            assert len(batch.entries) == 1, name
            assert batch.entries[0].label == name
        composed = de.ComposedDpEvent([de.GaussianDpEvent(50.0), de.LaplaceDpEvent(100.0)])
        batch = c.charge_dp_event(ds.id, composed)  # the DpEvent object itself
        assert [e.kind for e in batch.entries] == ["gaussian", "laplace"]
        assert c.budget(ds.id).entries == len(LEAVES) + 2


@pytest.mark.parametrize(
    "event",
    [
        dp_event_to_dict(de.NonPrivateDpEvent()),
        dp_event_to_dict(de.UnsupportedDpEvent()),
        dp_event_to_dict(de.SampledWithoutReplacementDpEvent(1000, 10, de.GaussianDpEvent(1.0))),
        {"type": "SomethingElseDpEvent", "x": 1},
    ],
)
def test_any_other_event_is_a_clear_error_naming_it(server_url: str, event: dict) -> None:
    with LedgerClient(server_url, ADMIN_KEY) as c:
        ds = c.create_dataset(f"refused-{event['type']}", 5.0, 1e-6, adaptive=False)
        with pytest.raises(InvalidRequest) as info:
            c.charge_dp_event(ds.id, event)
        assert event["type"] in info.value.detail
        assert c.budget(ds.id).entries == 0


def test_opacus_history_in_one_call_all_or_none(server_url: str) -> None:
    history = [(1.1, 0.01, 200), (1.3, 0.02, 50), (1.1, 0.01, 300)]
    with LedgerClient(server_url, ADMIN_KEY) as c:
        ds = c.create_dataset("sgd", 8.0, 1e-5, adaptive=False)
        batch = c.charge_opacus(ds.id, history, label="epoch 1-3")
        # identical (noise multiplier, rate) merged: 500 steps at (1.1, 0.01), 50 at (1.3, 0.02)
        assert len(batch.entries) == 2
        expected = [
            subsampled_gaussian(1.1, 0.01, steps=1, count=500),
            subsampled_gaussian(1.3, 0.02, steps=1, count=50),
        ]
        for entry, want in zip(batch.entries, expected, strict=True):
            assert _same(_stored(entry), want)
        curve = sum(
            (mechanism_from_dict(m).curve() for m in expected[1:]),
            mechanism_from_dict(expected[0]).curve(),
        )
        spend = Filter.create(FilterKind.RDP, Budget(8.0, 1e-5)).spend(curve)
        assert batch.spent.epsilon == pytest.approx(spend.epsilon, rel=1e-9)
        # a history that does not fit is refused whole: nothing of it is recorded
        with pytest.raises(BudgetExceeded):
            c.charge_opacus(ds.id, [(1.1, 0.01, 100), (0.5, 0.5, 10_000)])
        assert c.budget(ds.id).entries == 2


def test_opendp_measurements_end_to_end(server_url: str) -> None:
    lap = dp.m.make_laplace(*FLOATS, scale=4.0)
    gauss = dp.m.make_gaussian(*FLOATS, scale=8.0)
    fixed = dp.c.make_fix_delta(dp.c.make_zCDP_to_approxDP(gauss), 1e-9)
    with LedgerClient(server_url, ADMIN_KEY) as c:
        ds = c.create_dataset("opendp", 4.0, 1e-6, adaptive=False)
        kinds = []
        for measurement in (lap, gauss, fixed):
            charged = c.charge_opendp(ds.id, measurement, 1.0, label="opendp")
            kinds.append(charged.entry.kind)
            assert _same(_stored(charged.entry), opendp_mechanism(measurement, 1.0))
        assert kinds == ["pure_dp", "zcdp", "approx_dp"]
        eps, delta = fixed.map(1.0)
        curve = (
            mechanism_from_dict(pure_dp(lap.map(1.0))).curve()
            + mechanism_from_dict(zcdp(gauss.map(1.0))).curve()
            + mechanism_from_dict(approx_dp(eps, delta)).curve()
        )
        spend = Filter.create(FilterKind.RDP, Budget(4.0, 1e-6)).spend(curve)
        assert charged.spent.epsilon == pytest.approx(spend.epsilon, rel=1e-9)
        # an adaptive dataset cannot take the (epsilon, delta) entry: said, not charged
        adaptive = c.create_dataset("adaptive", 4.0, 1e-6)
        with pytest.raises(InvalidRequest, match="own delta"):
            c.charge_opendp(adaptive.id, fixed, 1.0)


# --- audit 43: F3 (Opacus), F4, F5, F6 -----------------------------------------------------------

dp.enable_features("honest-but-curious")  # (make_user_measurement)


def _user_measurement(measure: Any, loss: Any) -> Any:
    return dp.m.make_user_measurement(*FLOATS, measure, lambda x: x, lambda d_in: loss)


@pytest.mark.parametrize(
    ("measure", "loss", "says"),
    [
        (dp.approximate(dp.zero_concentrated_divergence()), (0.1, -1e-7), "delta"),
        (dp.approximate(dp.max_divergence()), (0.1, -1e-7), "delta"),
        (dp.max_divergence(), float("nan"), "epsilon"),
        (dp.max_divergence(), float("inf"), "epsilon"),
        (dp.max_divergence(), -0.5, "epsilon"),
        (dp.zero_concentrated_divergence(), float("inf"), "rho"),
        (dp.approximate(dp.max_divergence()), (float("inf"), 1e-7), "epsilon"),
        (dp.approximate(dp.max_divergence()), (0.5, float("nan")), "delta"),
        (dp.approximate(dp.max_divergence()), (0.5, 1.0), "delta"),
    ],
)
def test_opendp_losses_that_are_not_finite_or_negative_are_named(
    measure: Any, loss: Any, says: str
) -> None:
    """F4: a negative delta was dropped (``zcdp`` with no delta) and NaN or infinity failed in
    the JSON encoder ("Out of range float values are not JSON compliant")."""
    bad = loss[1] if says == "delta" and isinstance(loss, tuple) else loss
    bad = bad[0] if isinstance(bad, tuple) else bad
    with pytest.raises(ValueError, match=f"OpenDP {says} must be finite") as info:
        opendp_mechanism(_user_measurement(measure, loss), 1.0)
    assert repr(bad) in str(info.value)


@pytest.mark.parametrize("name", ["MaxDivergence", "Approximate(MaxDivergence)"])
def test_a_user_divergence_named_like_an_opendp_measure_is_refused(name: str) -> None:
    """F5: the measure was matched by its text, so a user divergence named "MaxDivergence"
    (which may mean anything) was charged as pure DP."""
    m = _user_measurement(dp.user_divergence(name), 0.3 if "(" not in name else (0.3, 0.0))
    assert str(m.output_measure) == name  # what the text comparison saw
    with pytest.raises(ValueError, match="has no translation"):
        opendp_mechanism(m, 1.0)
    # OpenDP's own measure of the same loss is read
    real = _user_measurement(dp.max_divergence(), 0.3)
    assert opendp_mechanism(real, 1.0) == pure_dp(0.3)


def test_opacus_values_no_ledger_accepts_name_the_history_entry() -> None:
    for history, says in (
        ([(1.0, 0.01, 10), (-1.0, 0.01, 10)], "history[1]: noise_multiplier -1.0 is negative"),
        ([(1.0, 1.5, 10)], "history[0]: sample_rate 1.5 is above 1"),
        ([(1.0, -0.1, 10)], "history[0]: sample_rate -0.1 is negative"),
        ([(0.0, 0.1, 10)], "history[0]: noise_multiplier 0 adds no noise"),
        ([(1.0, 0.0, 10)], "sample_rate 0"),
        # audit 47: an integer beyond the float range raised OverflowError (a CLI traceback)
        ([(1.0, 0.01, 10), (10**400, 0.01, 10)], "history[1]: noise_multiplier must be finite"),
        ([(1.0, -(10**400), 10)], "history[0]: sample_rate must be finite"),
    ):
        with pytest.raises(ValueError, match=re.escape(says)):
            opacus_dp_event(history)


def test_opacus_refusals_by_the_server_name_the_history_entry(server_url: str) -> None:
    """F3: a value only the server's ranges refuse (a noise multiplier below the smallest
    accepted) said "dp_event: ..." with no history index."""
    with LedgerClient(server_url, ADMIN_KEY) as c:
        ds = c.create_dataset("sgd-ranges", 8.0, 1e-5, adaptive=False)
        history = [(1.1, 0.01, 10), (1.0, 0.01, 5), (1e-4, 0.01, 10)]
        with pytest.raises(InvalidRequest) as info:
            c.charge_opacus(ds.id, history)
        detail = info.value.detail
        assert detail.startswith("Opacus history[2] (noise_multiplier=0.0001")
        assert "noise_multiplier 0.0001 is below the smallest accepted" in detail
        assert info.value.status == 422
        assert c.budget(ds.id).entries == 0


def test_dry_runs_of_the_integrations_record_nothing(server_url: str) -> None:
    """F6: ``dry_run=True`` on charge_dp_event, charge_opacus and charge_opendp answers what a
    charge would spend (the same spend the charge then records) and records nothing."""
    lap = dp.m.make_laplace(*FLOATS, scale=4.0)
    event = de.SelfComposedDpEvent(de.GaussianDpEvent(20.0), 3)
    history = [(1.1, 0.01, 100)]
    with LedgerClient(server_url, ADMIN_KEY) as c:
        ds = c.create_dataset("dry-integrations", 4.0, 1e-6, adaptive=False)
        for dry, charge in (
            (
                lambda: c.charge_dp_event(ds.id, event, dry_run=True),
                lambda: c.charge_dp_event(ds.id, event),
            ),
            (
                lambda: c.charge_opacus(ds.id, history, dry_run=True),
                lambda: c.charge_opacus(ds.id, history),
            ),
            (
                lambda: c.charge_opendp(ds.id, lap, 1.0, dry_run=True),
                lambda: c.charge_opendp(ds.id, lap, 1.0),
            ),
        ):
            before = c.budget(ds.id).entries
            answer = dry()
            assert answer.admitted
            assert c.budget(ds.id).entries == before
            charged = charge()
            assert charged.spent.epsilon == pytest.approx(answer.would_spend.epsilon, rel=1e-12)
        # a dry run that would not fit is a BudgetExceeded, and records no rejection either
        with pytest.raises(BudgetExceeded):
            c.charge_opacus(ds.id, [(0.5, 0.5, 10_000)], dry_run=True)
        assert c.budget(ds.id).entries == 3


def test_the_async_client_dry_runs_the_integrations_too(server_url: str) -> None:
    async def main() -> None:
        async with AsyncLedgerClient(server_url, ADMIN_KEY) as c:
            ds = await c.create_dataset("dry-async", 4.0, 1e-6, adaptive=False)
            answer = await c.charge_opacus(ds.id, [(1.1, 0.01, 100)], dry_run=True)
            assert answer.admitted and (await c.budget(ds.id)).entries == 0
            lap = dp.m.make_laplace(*FLOATS, scale=4.0)
            assert (await c.charge_opendp(ds.id, lap, 1.0, dry_run=True)).admitted
            with pytest.raises(InvalidRequest, match=re.escape("Opacus history[0]")):
                await c.charge_opacus(ds.id, [(1e-4, 0.01, 10)])
            assert (await c.budget(ds.id)).entries == 0

    asyncio.run(main())


def test_an_opendp_odometer_is_refused_with_a_clear_error() -> None:
    """An odometer has an ``output_measure`` OpenDP itself builds but no privacy map: it passed
    the measure check and failed with ``AttributeError: 'Odometer' object has no attribute
    'map'``. It is a ``ValueError`` naming it and what to charge instead; nothing is mapped."""
    odometer = dp.c.make_fully_adaptive_composition(
        dp.vector_domain(dp.atom_domain(T=int)), dp.symmetric_distance(), dp.max_divergence()
    )
    assert odometer.output_measure == dp.max_divergence()
    with pytest.raises(ValueError, match="Odometer") as info:
        opendp_mechanism(odometer, 1)
    assert "privacy map" in str(info.value)
