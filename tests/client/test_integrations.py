"""Issue 12 integrations through the client against a live server (SQLite and PostgreSQL): a
dp_accounting DpEvent, an Opacus history and an OpenDP measurement, each charged in one call.

Oracles: the server's own translation is checked against dp_accounting in
tests/client/test_dp_event_interop.py; here the entries recorded are compared with the mechanisms
built independently from the same parameters, and spends with the accounting core's filter.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import opendp.prelude as dp
import pytest
from dp_accounting import dp_event as de
from privacy_ledger_client import (
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
