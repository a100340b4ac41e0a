"""Numerical gaps closed (issue 13 item 4), each checked against 50-digit mpmath: the reported
epsilon or delta is never below the exact value, and exact zeros stay exactly zero."""

from __future__ import annotations

import math
from fractions import Fraction

import mpmath as mp
import numpy as np
import pytest
from dp_accounting import dp_event
from dp_accounting.rdp import rdp_privacy_accountant as rdpa

from app.accounting import closed_forms as cf
from app.accounting import conversions as conv
from app.accounting.compose import compose_arrays, compose_many
from app.accounting.curve import PrivacyCurve
from app.accounting.filters import Budget, Filter, FilterKind, filter_bound, spend, spend_delta
from app.accounting.kinds._spec import UnitCurves
from app.accounting.mechanisms import DiscreteLaplace, Gaussian, Laplace, mechanism_from_dict
from app.accounting.orders import DPACC_DEFAULT_ORDERS, NEAR_ONE, ORDERS, ORDERS_VERSION
from app.accounting.rounding import TINY, exp_up, up

mp.mp.dps = 50


def _gauss_delta(mu, eps) -> mp.mpf:
    mu, eps = mp.mpf(mu), mp.mpf(eps)
    return mp.ncdf(-eps / mu + mu / 2) - mp.e**eps * mp.ncdf(-eps / mu - mu / 2)


def _gauss_eps(mu, delta) -> mp.mpf:
    """The exact epsilon at delta by bisection in 50 digits."""
    lo, hi = mp.mpf(0), mp.mpf(1)
    while _gauss_delta(mu, hi) > delta:
        hi *= 2
    for _ in range(180):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _gauss_delta(mu, mid) > delta else (lo, mid)
    return hi


# --- rounding helpers and exact zeros --------------------------------------------------------


def test_up_keeps_an_exact_zero_and_exp_up_never_underflows_to_zero() -> None:
    assert up(0.0) == 0.0 and up(0.0, 8) == 0.0
    assert up(1.0) > 1.0 and up(-1.0) > -1.0
    assert exp_up(-math.inf) == 0.0
    assert exp_up(-800.0) == TINY  # e^-800 underflows; its bound does not
    assert exp_up(0.0) >= 1.0


@pytest.mark.parametrize("kind", list(FilterKind))
def test_an_empty_ledger_spends_exactly_zero(kind: FilterKind) -> None:
    zero = PrivacyCurve.zero()
    f = Filter.create(kind, Budget(1.0, 1e-6))
    for delta in (1e-300, 1e-12, 1e-6, 0.5):
        assert f.spend_at(zero, delta).epsilon == 0.0
    for epsilon in (0.0, 1e-9, 1.0, 50.0):
        assert f.spend_delta(zero, epsilon).delta == 0.0
    assert f.spend(zero).epsilon == 0.0
    assert f.remaining(zero).epsilon == 1.0 and f.remaining(zero).delta == 1e-6
    assert compose_many([]) == zero
    assert compose_arrays(UnitCurves.stack([])) == zero


# --- the exact-Gaussian conversion and the Gaussian-DP filter's bound ------------------------


def test_issue_example_is_no_longer_below_the_exact_value() -> None:
    curve = Gaussian(sigma=1e6, sensitivity=1e-6, count=10**7).curve()
    got = spend(FilterKind.RDP, curve, 1e-12)
    exact = _gauss_eps(mp.mpf(10) ** -12 * mp.sqrt(10**7), mp.mpf("1e-12"))
    assert got.method == "gaussian_exact"
    assert got.epsilon >= exact  # was 9.655236378705e-09 < 9.6552379022789e-09
    assert got.epsilon <= exact * (1 + 1e-5)


@pytest.mark.parametrize("seed", range(4))
def test_exact_gaussian_delta_and_epsilon_never_below(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(25):
        mu = float(np.exp(rng.uniform(np.log(1e-3), np.log(30.0))))
        eps = float(rng.uniform(0.0, 4.0 * mu + 2.0))
        exact = _gauss_delta(mu, eps)
        got = conv.gaussian_delta(mu, eps)
        assert got >= exact, (mu, eps)
        # the margin grows where the two log-CDFs nearly cancel (small mu) and with their size
        tight = 1e-10 if mu > 0.3 and exact > 1e-20 else 1e-7
        assert got <= exact * (1 + tight) + 1e-300, (mu, eps)
        delta = float(np.exp(rng.uniform(np.log(1e-15), np.log(0.3))))
        e_got = conv.gaussian_epsilon(mu, delta)
        assert (
            e_got >= _gauss_eps(mu, mp.mpf(delta)) or e_got == 0.0 and _gauss_delta(mu, 0) <= delta
        )


@pytest.mark.parametrize(
    "budget", [Budget(0.5, 1e-9), Budget(1.0, 1e-6), Budget(3.0, 1e-5), Budget(10.0, 1e-12)]
)
def test_gdp_bound_keeps_the_true_delta_within_budget(budget: Budget) -> None:
    bound = filter_bound(FilterKind.GDP, budget)
    assert bound is not None
    assert _gauss_delta(mp.sqrt(2 * mp.mpf(bound)), budget.epsilon) <= budget.delta
    # and the bound is not needlessly small
    assert _gauss_delta(mp.sqrt(2 * mp.mpf(bound) * (1 + 1e-6)), budget.epsilon) > budget.delta


# --- closed forms ------------------------------------------------------------------------------


def _laplace_exact(alpha: float, eps: float) -> mp.mpf:
    a, e = mp.mpf(alpha), mp.mpf(eps)
    return mp.log(
        a / (2 * a - 1) * mp.e ** ((a - 1) * e) + (a - 1) / (2 * a - 1) * mp.e ** (-a * e)
    ) / (a - 1)


@pytest.mark.parametrize("eps", [1e-9, 3e-7, 1e-4, 0.01, 0.05, 0.1, 0.3, 1.0, 10.0, 100.0])
def test_laplace_rdp_at_small_epsilon(eps: float) -> None:
    """No cancellation below eps = 0.1 (the earlier form was 5.7e-8 below at eps = 1e-9)."""
    got = cf.laplace_rdp(ORDERS, eps)
    for j in range(0, ORDERS.size, 3):
        exact = _laplace_exact(float(ORDERS[j]), eps)
        assert got[j] >= exact
        assert got[j] <= exact * (1 + 1e-12)


@pytest.mark.parametrize(
    ("eps", "k"), [(1e-9, 2), (1e-6, 10**9), (0.3, 7), (5.0, 1000), (100.0, 2), (100.0, 10**9)]
)
def test_randomized_response_margin_scales_with_the_magnitude(eps: float, k: int) -> None:
    got = cf.rr_rdp(ORDERS, eps, k)
    e = mp.mpf(eps)
    for j in range(0, ORDERS.size, 4):
        a = mp.mpf(float(ORDERS[j]))
        exact = mp.log((mp.e ** (a * e) + mp.e ** ((1 - a) * e) + k - 2) / (mp.e**e + k - 1)) / (
            a - 1
        )
        assert got[j] >= exact
        assert got[j] <= exact * (1 + 1e-11)


def _discrete_laplace_exact(alpha: float, eps: float, sens: int) -> mp.mpf:
    """docs/formulas.md §1.3 closed form at 60 digits (the float terms' cancellation is gone)."""
    with mp.workdps(60):
        a, e = mp.mpf(alpha), mp.mpf(eps)
        t = e / sens
        s = mp.e ** (-(2 * a - 1) * t)
        total = (mp.e ** ((a - 1) * e) + mp.e ** (-a * e)) / (1 + mp.e ** (-t))
        total += mp.tanh(t / 2) * mp.e ** ((a - 1) * e) * s * (1 - s ** (sens - 1)) / (1 - s)
        return mp.log(total) / (a - 1)


@pytest.mark.parametrize("sens", [3 * 10**6, 10**7, 10**8, 10**9])
@pytest.mark.parametrize("eps", [0.3, 1.0, 3.0, 10.0])
def test_discrete_laplace_margin_scales_with_the_cancelling_logs(eps: float, sens: int) -> None:
    """At Delta = 1e7, eps = 1, alpha = 1.02 the curve was 1.1e-13 below the exact value: for
    t = eps / Delta tiny, log tanh(t/2) (-16.8) and -log(1 - e^{-(2a-1)t}) (+16.1) cancel,
    each a few ulps of 17 off, against a fixed margin of 8e-16 / (alpha - 1)."""
    rdp = DiscreteLaplace(epsilon=eps, sensitivity=sens).curve().rdp
    for j in [*range(0, 40), *range(40, ORDERS.size, 10)]:
        alpha = float(ORDERS[j])
        exact = _discrete_laplace_exact(alpha, eps, sens)
        assert rdp[j] >= exact, (alpha, float((rdp[j] - exact) / exact))
        assert rdp[j] <= exact * (1 + 1e-11), alpha


@pytest.mark.parametrize("eps", [1e-9, 1e-4, 0.0999, 0.1, 0.1001, 1.0, 30.0])
def test_tight_rho_values_are_never_below(eps: float) -> None:
    e = mp.mpf(eps)
    assert cf.binary_rr_rho(eps) >= e * mp.tanh(e / 2)
    assert cf.laplace_rho(eps) >= e + mp.e ** (-e) - 1
    assert cf.rappor_rho(eps) >= e * mp.tanh(e / 4)
    for k in (3, 6, 10**6):
        assert cf.rr_kl(eps, k) >= e * mp.expm1(e) / (mp.e**e + k - 1)


# --- conversions --------------------------------------------------------------------------------


@pytest.mark.parametrize("delta", [1e-5, 1e-12])
@pytest.mark.parametrize("scale", [1e-6, 1.0, 1e3])
def test_improved_rdp_conversion_is_never_below_its_formula(delta: float, scale: float) -> None:
    rdp = Laplace(epsilon=0.3, count=int(10 * scale) + 1).curve().rdp * scale
    got, order = conv.rdp_epsilon_improved(rdp, delta)
    best = min(
        mp.mpf(float(r))
        + mp.log1p(-1 / mp.mpf(float(a)))
        - (mp.log(delta) + mp.log(mp.mpf(float(a)))) / (mp.mpf(float(a)) - 1)
        for r, a in zip(rdp, ORDERS, strict=True)
    )
    if got == 0.0:  # the total-variation candidate: delta >= sqrt(1 - e^-r) at that order
        r = mp.mpf(float(rdp[int(np.flatnonzero(ORDERS == order)[0])]))
        assert delta >= mp.sqrt(-mp.expm1(-r)) or best <= 0
    else:
        assert got >= best
        assert got <= best * (1 + 1e-12) + 1e-13  # the terms' size sets the absolute margin
    assert order in ORDERS


@pytest.mark.parametrize(
    ("rho", "delta"), [(1e-8, 1e-6), (0.01, 1e-5), (5.0, 1e-12), (300.0, 1e-6)]
)
def test_zcdp_conversions_are_never_below_their_infimum(rho: float, delta: float) -> None:
    r, d = mp.mpf(rho), mp.mpf(delta)

    def cks(a: mp.mpf) -> mp.mpf:
        return a * r + mp.log1p(-1 / a) + (mp.log(1 / d) - mp.log(a)) / (a - 1)

    def at(t: mp.mpf) -> mp.mpf:
        return cks(1 + mp.e**t)

    best_t = min((mp.mpf(t) / 20 for t in range(-240, 600)), key=at)
    lo, hi = best_t - mp.mpf(1) / 20, best_t + mp.mpf(1) / 20
    for _ in range(120):  # ternary search: the function of t = log(alpha - 1) is unimodal here
        m1, m2 = lo + (hi - lo) / 3, hi - (hi - lo) / 3
        lo, hi = (m1, hi) if at(m1) > at(m2) else (lo, m2)
    infimum = at((lo + hi) / 2)
    assert conv.zcdp_epsilon_cks(rho, delta) >= infimum
    assert conv.zcdp_epsilon_cks(rho, delta) <= infimum * (1 + 1e-8)
    assert conv.zcdp_epsilon_bun_steinke(rho, delta) >= r + 2 * mp.sqrt(r * mp.log(1 / d))
    eps = conv.zcdp_epsilon(rho, delta)
    assert conv.zcdp_delta_cks(rho, eps) <= delta * (1 + 1e-9)


@pytest.mark.parametrize(
    ("rho", "epsilon"),
    [(1e-100, 0.0), (1e-110, 0.0), (1e-151, 0.0), (1e-300, 0.0), (1e-100, 1e-80), (1e-60, 1e-31)],
)
def test_cks_delta_of_a_tiny_rho_is_found(rho: float, epsilon: float) -> None:
    """A ledger of rho = 1e-100 asked for delta at eps = 0 was a 500: Brent's method on alpha
    ran out of iterations on a bracket up to 5e99 (alpha* ~ 1 / sqrt(2 rho)). The answer lies
    between the Gaussian's exact delta at mu = sqrt(2 rho) (a rho-zCDP mechanism, so no bound
    for every rho-zCDP mechanism is below it) and the CKS infimum over alpha (mpmath)."""
    r, e = mp.mpf(rho), mp.mpf(epsilon)
    mu = mp.sqrt(2 * r)
    gaussian = mp.ncdf(-e / mu + mu / 2) - mp.e**e * mp.ncdf(-e / mu - mu / 2)

    def log_cks(t: mp.mpf) -> mp.mpf:
        a = 1 + mp.e**t
        return (a - 1) * (a * r - e) + a * mp.log1p(-1 / a) - mp.log(a - 1)

    best_t = min((mp.mpf(t) / 4 for t in range(-40, 1500)), key=log_cks)
    infimum = mp.e ** log_cks(best_t)
    got = conv.zcdp_delta_cks(rho, epsilon)
    assert gaussian <= got <= infimum * (1 + 1e-6)


@pytest.mark.parametrize(
    ("rho", "epsilon"),
    [
        (132.56933555880545, 119.31240200292491),
        (1e6, 1e6),
        (132.57, 119.313),
        (132.5, 119.2),
        (1e3, 990.0),
        (1e4, 9990.0),
        (10.0, 0.0),
        (10.0, 1.0),
        (10.0, 8.0),
    ],
)
def test_cks_delta_near_one_is_never_below_the_infimum(rho: float, epsilon: float) -> None:
    """Where delta is near 1 the best order is within 1e-6 of 1: log1p(-1 / alpha) from the
    rounded alpha was off by u / (alpha - 1) and cancelled against log(alpha - 1), and delta was
    9.4e-12 below the CKS infimum (rho = 132.57, eps = 119.31, alpha* = 1 + 1.7e-6). The
    infimum here: the root of the increasing derivative by bisection in 60 digits."""
    with mp.workdps(60):
        r, e = mp.mpf(rho), mp.mpf(epsilon)

        def deriv(a: mp.mpf) -> mp.mpf:
            return (2 * a - 1) * r - e + mp.log1p(-1 / a)

        lo, hi = 1 + mp.mpf(10) ** -50, (e + 1) / (2 * r) + 2
        for _ in range(400):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if deriv(mid) < 0 else (lo, mid)
        a = (lo + hi) / 2
        log_cks = (a - 1) * (a * r - e) + a * mp.log1p(-1 / a) - mp.log(a - 1)
        infimum = min(mp.e**log_cks, mp.sqrt(-mp.expm1(-r)), mp.mpf(1))
    got = conv.zcdp_delta_cks(rho, epsilon)
    assert got >= infimum, float((got - infimum) / infimum)
    assert got <= infimum * (1 + 1e-12)


# --- the order grid -------------------------------------------------------------------------


def test_orders_near_one_are_on_the_grid() -> None:
    assert ORDERS_VERSION == 2 and ORDERS.size == 243
    assert set(NEAR_ONE) <= set(ORDERS.tolist()) and set(DPACC_DEFAULT_ORDERS) <= set(
        ORDERS.tolist()
    )
    assert (np.diff(ORDERS) > 0).all() and ORDERS[0] == 1.01


def test_very_large_epsilon_uses_the_orders_near_one() -> None:
    """2,000 Laplace queries at eps = 5: the optimum lies below 1.1; never looser than
    dp_accounting's RDP accountant, tighter than the smallest order 1.1 allows."""
    curve = Laplace(epsilon=5.0, count=2000).curve()
    s = spend(FilterKind.RDP, curve, 1e-6)
    assert s.order is not None and s.order < 1.1
    without = conv.rdp_epsilon_improved(curve.rdp[ORDERS >= 1.1], 1e-6, ORDERS[ORDERS >= 1.1])[0]
    assert s.epsilon < without
    acc = rdpa.RdpAccountant()
    acc.compose(dp_event.SelfComposedDpEvent(dp_event.LaplaceDpEvent(0.2), 2000))
    assert s.epsilon <= acc.get_epsilon(1e-6) * (1 + 1e-12)
    assert math.isfinite(s.epsilon)


# --- epsilons so small that eps^2 underflows (approx_dp takes any epsilon >= 0) ----------------


def _binary_rr_rdp_exact(alpha: float, eps: float) -> mp.mpf:
    """log((e^{a e} + e^{(1-a) e}) / (e^e + 1)) / (a - 1) [M17 Table II; docs/formulas.md
    §1.4], in enough digits that the cancellation (about e^2 relative) leaves 30 of them."""
    digits = int(-2 * math.log10(eps)) + 60
    with mp.workdps(digits):
        a, e = mp.mpf(alpha), mp.mpf(eps)
        return mp.log((mp.e ** (a * e) + mp.e ** ((1 - a) * e)) / (mp.e**e + 1)) / (a - 1)


@pytest.mark.parametrize("eps", [1e-300, 1e-200, 1e-162, 1e-160, 1e-156, 1e-155, 1e-154, 1e-150])
def test_approx_dp_with_a_tiny_epsilon_is_never_below(eps: float) -> None:
    """approx_dp(eps = 1e-200, delta = 0) had rho = 0 and an all-zero RDP curve (eps tanh(eps / 2)
    and log1p(T) underflow), so the delta reported at epsilon 0 was 0 where the worst eps-DP
    mechanism (binary RR) has tanh(eps / 2) = 5e-201, and the epsilon at a delta below that
    was 0 instead of about eps. Subnormal values kept too few bits for the relative margins
    (at eps = 1e-155 the curve was 6e-14 below at order 1.5)."""
    curve = mechanism_from_dict({"mechanism": "approx_dp", "epsilon": eps, "delta": 0.0}).curve()
    e = mp.mpf(eps)
    assert curve.rho >= e * mp.tanh(e / 2)
    for j, alpha in enumerate(ORDERS):
        assert curve.rdp[j] >= _binary_rr_rdp_exact(float(alpha), eps), float(alpha)
    tv = mp.tanh(e / 2)  # binary RR's delta at epsilon 0: (e^eps - 1) / (e^eps + 1)
    for kind in (FilterKind.RDP, FilterKind.ZCDP):
        assert spend_delta(kind, curve, 0.0).delta >= tv, kind
        # at a delta below tv the epsilon is positive: binary RR's delta(e') is
        # (e^eps - e^e') / (e^eps + 1), so e' >= log(e^eps - delta (e^eps + 1))
        small = float(tv) / 4
        if small >= 2.0**-1022:
            exact_eps = mp.log(mp.e**e - mp.mpf(small) * (mp.e**e + 1))
            assert spend(kind, curve, small).epsilon >= exact_eps, kind


@pytest.mark.parametrize(("rho", "epsilon"), [(5e-324, 10.0), (1e-300, 1e6), (1e-200, 1e100)])
def test_bun_steinke_delta_of_a_positive_rho_is_never_exactly_zero(
    rho: float, epsilon: float
) -> None:
    """(eps - rho)^2 / (4 rho) overflowed to inf and delta = e^-inf was an exact 0, a pure-DP
    claim, where the bound exp(-(eps - rho)^2 / (4 rho)) is positive (below the least float):
    the conversions' promise is the least positive float for an underflow, 0 only for an exact
    0. (A zcdp entry of rho 1e-300 and GET spend?epsilon=1e6 reported delta 0.)"""
    r, e = mp.mpf(rho), mp.mpf(epsilon)
    assert mp.exp(-((e - r) ** 2) / (4 * r)) > 0
    assert conv.zcdp_delta_bun_steinke(rho, epsilon) == TINY
    curve = PrivacyCurve(rho, rho * ORDERS, math.inf, False)
    assert spend_delta(FilterKind.ZCDP, curve, epsilon).delta > 0.0


@pytest.mark.parametrize("delta", [5e-324, 1e-310])
def test_conversions_of_a_subnormal_delta_are_numbers(delta: float) -> None:
    """rho = 0 with a subnormal delta: rho * log(1 / delta) was 0 * inf = NaN (the module promises
    no NaN); the exact Gaussian's epsilon raised "epsilon must be finite" from its bracket."""
    assert conv.zcdp_epsilon_bun_steinke(0.0, delta) == 0.0
    assert conv.zcdp_epsilon(0.0, delta) == 0.0
    assert conv.gaussian_epsilon(1.0, delta) >= 0.0


@pytest.mark.parametrize("rho", [5e-324, 1e-310, 2.0**-1030, 1e-300])
@pytest.mark.parametrize("delta", [1e-100, 1e-6, 0.5])
def test_bun_steinke_epsilon_of_a_tiny_rho_is_above_its_formula(rho: float, delta: float) -> None:
    """rho + 2 sqrt(rho log(1/delta)) [BS16 Prop 3] with rho * log(1/delta) subnormal: the
    product kept too few bits, and the candidate (a line of the `conversions` a zcdp compose
    lists; the spend took CKS, lower) came out below its own formula, 6.7e-161 against 1.3e-160
    at rho = 5e-324, delta = 1e-100 (an outside audit). 50-digit oracle."""
    mp.mp.dps = 50
    exact = mp.mpf(rho) + 2 * mp.sqrt(mp.mpf(rho) * mp.log(1 / mp.mpf(delta)))
    ours = conv.zcdp_epsilon_bun_steinke(rho, delta)
    assert mp.mpf(ours) >= exact
    assert mp.mpf(ours) <= exact * (1 + mp.mpf(2) ** -48)


def _gaussian_rho_cases() -> list[tuple[float, float]]:
    """(sigma, sensitivity): random over the whole accepted range, and values whose quotient
    or square rounds down (3, 10, 7 / 3, ...)."""
    rng = np.random.default_rng(46)
    sigma = np.exp(rng.uniform(math.log(1e-6), math.log(1e12), 400))
    ratio = np.exp(rng.uniform(math.log(1e-12), math.log(1e6), 400))
    random = [(float(s), float(s * r)) for s, r in zip(sigma, ratio, strict=True)]
    random = [(s, d) for s, d in random if 1e-6 <= d <= 1e12]
    chosen = [(3.0, 1.0), (10.0, 1.0), (3.0, 7.0), (0.3, 1.0), (1.1, 1.0), (123.456, 2.5)]
    return chosen + random


def test_gaussian_rho_is_never_below_and_exact_values_stay_exact() -> None:
    """The Gaussian's (and DP-SGD's) stored zCDP rho = Delta^2 / (2 sigma^2) is never below the
    exact value (0.5 (Delta / sigma)^2 rounded to nearest was up to 2 ulps below it: sigma = 3
    read 0.05555555555555555 < 1/18), and a value that is a float (sigma = 2: 1/8) stays exact.
    Oracle: exact rationals."""
    cases = _gaussian_rho_cases()
    below = 0
    for sigma, sens in cases:
        exact = Fraction(sens) ** 2 / (2 * Fraction(sigma) ** 2)
        rhos = [Gaussian(sigma=sigma, sensitivity=sens).curve().rho, cf.gaussian_rho(sigma, sens)]
        if 1e-3 <= sigma / sens <= 1e6:  # DP-SGD's noise multiplier range
            dp_sgd = {"sigma": sigma, "sensitivity": sens, "sample_rate": 0.01, "steps": 1}
            rhos.append(
                mechanism_from_dict({"mechanism": "subsampled_gaussian", **dp_sgd}).curve().rho
            )
        for rho in rhos:
            below += Fraction(rho) < exact
            assert Fraction(rho) >= exact, (sigma, sens, rho, float(exact))
            assert rho <= float(exact) * (1 + 2.0**-49), (sigma, sens)  # a few ulps at most
    assert below == 0
    for sigma, sens, exact_float in ((2.0, 1.0, 0.125), (0.5, 1.0, 2.0), (4.0, 2.0, 0.125)):
        assert Gaussian(sigma=sigma, sensitivity=sens).curve().rho == exact_float
