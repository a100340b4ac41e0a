"""The composed PLD state (app/accounting/pld.py): soundness of every operation, serialisation,
bounded size, and composition laws (hypothesis).

Oracles: exact convolution in long double (np.convolve), exact hockey sticks of binomial
privacy loss distributions in 50-digit mpmath, and the exact analytic Gaussian.
"""

from __future__ import annotations

import math

import mpmath as mp
import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from app.accounting import conversions as conv
from app.accounting import pld as P
from app.accounting import pld_mechanisms as pm
from app.accounting.pld import BASE_INTERVAL, MAX_SUPPORT, Pld, PldPmf, interval_for_budget

mp.mp.dps = 50
FAST = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
COARSE = 1e-3  # a coarser grid keeps the property tests quick; soundness does not depend on it


def _eps_grid(p: Pld) -> list[float]:
    return [0.0, 0.05, 0.3, 1.0, 2.5, 5.0]


# --- single operations are pessimistic ----------------------------------------------------


def test_fft_error_bound_covers_the_actual_error() -> None:
    rng = np.random.default_rng(7)
    for n, m in ((300, 200), (5000, 70), (20000, 3000)):
        a = rng.random(n) ** 6
        a /= a.sum()
        b = rng.random(m) ** 6
        b /= b.sum()
        exact = np.convolve(a.astype(np.longdouble), b.astype(np.longdouble))
        computed, bound = P._convolve_arrays(a, b)
        deficit = np.maximum(exact - computed.astype(np.longdouble), 0).sum()
        assert float(deficit) <= bound + 0.0, (n, m, float(deficit), bound)
        assert bound < 1e-11  # and it is small enough to be harmless


def test_long_double_fft_bound_covers_the_actual_error() -> None:
    rng = np.random.default_rng(11)
    a = rng.random(300) ** 4
    a /= a.sum()
    b = rng.random(120) ** 4
    b /= b.sum()
    computed, bound = P._fft_convolve(a, b, tolerance=0.0)
    assert bound < P._fft_error_bound(a, b) / 100  # the extended path is much tighter
    exact = [
        mp.fsum(mp.mpf(a[i]) * mp.mpf(b[k - i]) for i in range(max(0, k - 119), min(k, 299) + 1))
        for k in range(419)
    ]
    deficit = mp.fsum(max(mp.mpf(0), e - mp.mpf(c)) for e, c in zip(exact, computed, strict=True))
    assert deficit <= bound


def test_self_composition_keeps_the_infinity_mass_small() -> None:
    step = pm.subsampled_gaussian(1.0, 1.0, 0.01, 1)
    run = pm.subsampled_gaussian(1.0, 1.0, 0.01, 1000)
    assert max(run.remove.infinity_mass, run.add_pmf.infinity_mass) < 1e-10
    assert run.epsilon(1e-9) < math.inf
    assert step.self_compose(1000) == run


def test_extended_states_compose_in_long_double(monkeypatch: pytest.MonkeyPatch) -> None:
    assert P.state_for_budget(3.0, 1e-6).extended is False
    assert P.state_for_budget(3.0, 1e-9).extended is True
    entry = pm.gaussian(30.0)
    plain = Pld.identity().compose(pm.laplace(0.2, 10)).compose(entry)
    wide = Pld.identity(extended=True).compose(pm.laplace(0.2, 10)).compose(entry)
    assert wide.extended
    # what remains is the tail budget (1e-14 per convolution), not the FFT bound
    assert wide.remove.infinity_mass < plain.remove.infinity_mass / 3
    assert Pld.from_bytes(wide.to_bytes()) == wide
    assert plain.epsilon(1e-6) * (1 - 1e-8) <= wide.epsilon(1e-6) <= plain.epsilon(1e-6)


def test_convolution_of_atoms_is_exact_up_to_a_relative_margin() -> None:
    a = np.zeros(100)
    a[[3, 50, 99]] = [0.2, 0.5, 0.3]
    b = np.zeros(7)
    b[[0, 6]] = [0.25, 0.75]
    computed, bound = P._convolve_arrays(a, b)
    exact = np.convolve(a, b)
    assert bound == 0.0
    assert (computed >= exact).all()
    np.testing.assert_allclose(computed, exact, rtol=1e-14)


def test_trimming_and_coarsening_only_raise_delta() -> None:
    base = pm.laplace(0.1, 50, interval=BASE_INTERVAL)
    pmf = base.remove
    trimmed = pmf.trimmed(left=1e-3, right=1e-9)
    assert trimmed.size < pmf.size
    for factor in (1, 2, 8, 64):
        coarse = pmf.coarsened(factor)
        assert coarse.size <= pmf.size // factor + 2
        for eps in (-1.0, 0.0, 0.2, 1.0, 2.0, 3.0):
            d = pmf.delta(eps, BASE_INTERVAL)
            assert coarse.delta(eps, BASE_INTERVAL * factor) >= d
            assert trimmed.delta(eps, BASE_INTERVAL) >= d


def test_epsilon_and_delta_are_consistent() -> None:
    p = pm.gaussian(2.0, count=5)
    for delta in (1e-12, 1e-9, 1e-6, 1e-3, 0.1):
        eps = p.epsilon(delta)
        assert p.delta(eps) <= delta
        assert p.delta(eps * (1 - 1e-9) - 1e-12) > delta or eps == 0.0


def test_epsilon_edge_cases() -> None:
    ident = Pld.identity()
    assert ident.epsilon(1e-9) == 0.0
    assert ident.delta(0.0) == 0.0
    heavy = Pld(BASE_INTERVAL, PldPmf(0, np.ones(1), 0.01))
    assert heavy.epsilon(1e-3) == math.inf
    assert heavy.epsilon(0.02) == 0.0


# --- against exact values -------------------------------------------------------------------


def _binomial_rr_delta(eps_rr: float, n: int, eps: float) -> mp.mpf:
    """Exact hockey stick of n binary randomized responses (loss (2j - n) eps_rr w.p. Bin)."""
    p = mp.e ** mp.mpf(eps_rr) / (1 + mp.e ** mp.mpf(eps_rr))
    total = mp.mpf(0)
    for j in range(n + 1):
        loss = (2 * j - n) * mp.mpf(eps_rr)
        if loss > eps:
            total += mp.binomial(n, j) * p**j * (1 - p) ** (n - j) * (1 - mp.e ** (eps - loss))
    return total


@pytest.mark.parametrize(("eps_rr", "n"), [(0.5, 50), (1.0, 7), (0.05, 400), (2.0, 3)])
def test_randomized_response_never_below_the_exact_binomial(eps_rr: float, n: int) -> None:
    ours = pm.randomized_response(eps_rr, 2, n)
    for eps in (0.0, 0.5 * eps_rr, eps_rr * math.sqrt(n), 0.9 * n * eps_rr):
        exact = _binomial_rr_delta(eps_rr, n, eps)
        got = ours.delta(eps)
        assert got >= exact
        # absolute slack: tails moved to +infinity and FFT error bounds, ~1e-12 in all
        assert got <= exact * (1 + 1e-3) + 5e-11
    # pure_dp is the same worst case, RAPPOR is 2n of them at eps / 2
    assert pm.pure_dp(eps_rr, n).delta(0.3) >= _binomial_rr_delta(eps_rr, n, 0.3)
    assert pm.rappor(2 * eps_rr, n).delta(0.3) >= _binomial_rr_delta(eps_rr, 2 * n, 0.3)


@pytest.mark.parametrize(("sigma", "count"), [(1.0, 1), (3.0, 10), (20.0, 400), (0.7, 2)])
def test_gaussian_never_below_the_exact_analytic_gaussian(sigma: float, count: int) -> None:
    ours = pm.gaussian(sigma, 1.0, count)
    mu = math.sqrt(count) / sigma
    for delta in (1e-10, 1e-6, 1e-3):
        exact = conv.gaussian_epsilon(mu, delta)
        got = ours.epsilon(delta)
        assert exact <= got <= exact * 1.001 + 1e-6


def test_composing_different_gaussians_matches_one_gaussian() -> None:
    sigmas = [20.0, 35.0, 50.0, 80.0, 100.0] * 40
    state = Pld.identity()
    for s in sigmas:
        state = state.compose(pm.gaussian(s))
    mu = math.sqrt(sum(1 / s**2 for s in sigmas))
    exact = conv.gaussian_epsilon(mu, 1e-6)
    got = state.epsilon(1e-6)
    assert exact <= got <= exact * 1.01


# --- serialisation ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "state",
    [
        Pld.identity(),
        pm.laplace(0.3, 4),
        pm.subsampled_gaussian(1.0, 1.0, 0.05, 20, interval=COARSE),
        pm.gaussian(5.0).compose(pm.subsampled_gaussian(2.0, 1.0, 0.1, 3)),
    ],
)
def test_serialisation_round_trip_is_exact(state: Pld) -> None:
    data = state.to_bytes()
    back = Pld.from_bytes(data)
    assert back == state
    assert back.to_bytes() == data
    assert back.epsilon(1e-6) == state.epsilon(1e-6)
    assert len(data) == 16 + sum(24 + 8 * p.size for p in (state.remove, state.add) if p)


@pytest.mark.parametrize(
    "mutate",
    [
        lambda b: b[:10],
        lambda b: b"XYZ" + b[3:],
        lambda b: b + b"\x00",
        lambda b: b[:-8],
        lambda b: b[:4] + b"\x07" + b[5:],
    ],
)
def test_corrupt_serialisations_are_refused(mutate) -> None:
    data = pm.laplace(0.3, 4).to_bytes()
    with pytest.raises(ValueError):
        Pld.from_bytes(mutate(data))


def test_negative_mass_is_refused() -> None:
    with pytest.raises(ValueError):
        PldPmf(0, np.array([0.5, -0.1]), 0.0)


# --- bounded memory ---------------------------------------------------------------------------


def test_interval_follows_the_budget() -> None:
    assert interval_for_budget(1.0, 1e-6) == BASE_INTERVAL
    assert interval_for_budget(8.0, 1e-6) == BASE_INTERVAL
    previous = BASE_INTERVAL
    for eps in (12.0, 30.0, 100.0, 1000.0):
        d = interval_for_budget(eps, 1e-6)
        ratio = d / BASE_INTERVAL
        assert ratio == 2 ** round(math.log2(ratio))
        assert d >= previous
        previous = d
    assert interval_for_budget(100.0, 1e-6) > BASE_INTERVAL


def test_a_mu_20_gaussian_stays_within_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    # the construction that took > 8 GB at interval 1e-4: the grid is coarsened first
    monkeypatch.setattr(pm, "UNIT_MAX_SUPPORT", 2**16)
    pm.clear_cache()
    try:
        g = pm.gaussian(0.05, 1.0)
        assert g.size <= 2**16
        assert g.interval > BASE_INTERVAL
        assert g.epsilon(1e-6) >= conv.gaussian_epsilon(20.0, 1e-6)
    finally:
        pm.clear_cache()


def test_composition_coarsens_instead_of_growing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(P, "MAX_SUPPORT", 4000)
    fine = pm.laplace(0.2, 1, interval=COARSE)
    state = Pld.identity(COARSE)
    reference = Pld.identity(COARSE)
    for _ in range(60):
        state = state.compose(fine)
        assert state.remove.size <= 4000
    monkeypatch.setattr(P, "MAX_SUPPORT", 2**20)
    for _ in range(60):
        reference = reference.compose(fine)
    assert state.interval > COARSE
    assert state.epsilon(1e-6) >= reference.epsilon(1e-6) * (1 - 1e-9)


def test_one_charge_is_one_convolution_per_direction(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[int, int]] = []
    original = P._convolve_arrays

    def counting(a, b, *rest):
        calls.append((a.size, b.size))
        return original(a, b, *rest)

    state = pm.laplace(0.1, 30, interval=COARSE).compose(
        pm.subsampled_gaussian(1.0, 1.0, 0.02, 5, interval=COARSE)
    )
    entry = pm.gaussian(30.0, interval=COARSE)
    monkeypatch.setattr(P, "_convolve_arrays", counting)
    state.compose(entry)
    assert len(calls) == 2  # remove and add; a symmetric state needs one
    calls.clear()
    pm.laplace(0.1, 30, interval=COARSE).compose(entry)
    assert len(calls) == 1


def test_twenty_parameter_sets_cost_twenty_constructions() -> None:
    params = [{"mechanism": "gaussian", "sigma": 20.0 + 4 * i} for i in range(10)] + [
        {"mechanism": "laplace", "epsilon": 0.01 * (i + 1)} for i in range(5)
    ]
    params += [{"mechanism": "randomized_response", "epsilon": 0.05, "k": k} for k in (2, 3, 4)]
    params += [
        {"mechanism": "exponential", "epsilon": 0.05},
        {"mechanism": "pure_dp", "epsilon": 0.02},
    ]
    assert len(params) == 20
    pm.clear_cache()
    state = Pld.identity(COARSE)
    for i in range(1000):
        state = state.compose(pm.for_mechanism(params[i % 20], interval=state.interval))
    info = pm.cache_info()
    assert info.misses == 20
    assert info.hits == 980
    assert state.size <= MAX_SUPPORT
    pm.clear_cache()


# --- composition laws (hypothesis) --------------------------------------------------------------

entries = st.one_of(
    st.builds(lambda s: ("gaussian", s), st.floats(0.5, 30.0)),
    st.builds(lambda e: ("laplace", e), st.floats(0.01, 2.0)),
    st.builds(lambda e, k: ("rr", e, k), st.floats(0.01, 2.0), st.integers(2, 6)),
    st.builds(lambda e: ("exp", e), st.floats(0.01, 2.0)),
    st.builds(lambda s, q: ("sg", s, q), st.floats(0.8, 5.0), st.floats(0.001, 0.5)),
)


def _build(entry: tuple, count: int = 1) -> Pld:
    kind = entry[0]
    if kind == "gaussian":
        return pm.gaussian(entry[1], 1.0, count, interval=COARSE)
    if kind == "laplace":
        return pm.laplace(entry[1], count, interval=COARSE)
    if kind == "rr":
        return pm.randomized_response(entry[1], entry[2], count, interval=COARSE)
    if kind == "exp":
        return pm.exponential(entry[1], count, interval=COARSE)
    return pm.subsampled_gaussian(entry[1], 1.0, entry[2], count, interval=COARSE)


# Orders of composition differ only by where tails were cut and by the FFT error bounds: a few
# 1e-12 in delta, whatever epsilon (LEFT_TAIL_MASS + RIGHT_TAIL_MASS + bounds per convolution).
ORDER_SLACK = 2e-11


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= ORDER_SLACK + 1e-9 * max(abs(a), abs(b))


@FAST
@given(entries, entries, entries)
def test_composition_is_commutative_and_associative(a: tuple, b: tuple, c: tuple) -> None:
    pa, pb, pc = _build(a), _build(b), _build(c)
    ab = pa.compose(pb)
    ba = pb.compose(pa)
    left = ab.compose(pc)
    right = pa.compose(pb.compose(pc))
    for eps in (0.0, 0.5, 2.0, 5.0):
        assert _close(ab.delta(eps), ba.delta(eps))
        assert _close(left.delta(eps), right.delta(eps))


@FAST
@given(entries, st.integers(1, 30))
@example(("sg", 2.0, 0.0625), 15)  # found by a random run: cut tails differ by 1.2e-12
def test_monotone_in_count(entry: tuple, count: int) -> None:
    # (the slack is ORDER_SLACK's: count and count + 1 are composed by different sequences of
    # squarings, whose cut tails, moved to +infinity, differ by ~1e-12: DP-SGD sigma 2, q 1/16
    # at eps 2 gives 1.6e-12 for 15 steps and 3.9e-13 for 16, both upper bounds on ~0)
    fewer, more = _build(entry, count), _build(entry, count + 1)
    for eps in (0.0, 0.5, 2.0):
        assert more.delta(eps) >= fewer.delta(eps) - ORDER_SLACK


@FAST
@given(st.floats(0.5, 30.0), st.floats(1.01, 3.0), st.floats(0.01, 2.0), st.floats(1.01, 3.0))
def test_monotone_in_parameters(sigma: float, s_factor: float, eps: float, e_factor: float) -> None:
    # less noise / more epsilon never gives a smaller delta at any epsilon
    pairs = [
        (pm.gaussian(sigma * s_factor, interval=COARSE), pm.gaussian(sigma, interval=COARSE)),
        (pm.laplace(eps, interval=COARSE), pm.laplace(eps * e_factor, interval=COARSE)),
        (
            pm.randomized_response(eps, 3, interval=COARSE),
            pm.randomized_response(eps * e_factor, 3, interval=COARSE),
        ),
        (pm.exponential(eps, interval=COARSE), pm.exponential(eps * e_factor, interval=COARSE)),
        (
            pm.subsampled_gaussian(sigma * s_factor, 1.0, 0.05, interval=COARSE),
            pm.subsampled_gaussian(sigma, 1.0, 0.05, interval=COARSE),
        ),
    ]
    for weaker, stronger in pairs:
        for e in (0.0, 0.1, 0.5, 2.0):
            assert stronger.delta(e) >= weaker.delta(e) - ORDER_SLACK
