"""The generic kinds (pure_dp, exponential, zcdp, rdp, approx_dp) against independent oracles:
50-digit divergences of the worst-case pairs (mpmath), autodp's pure-DP RDP, dp_accounting's
RDP accountant (ZCDpEvent) and its privacy loss distributions (approx_dp soundness), and the
golden vectors of docs/formulas.md §1.7."""

from __future__ import annotations

import math
from dataclasses import replace

import mpmath as mp
import numpy as np
import pytest
from dp_accounting import dp_event
from dp_accounting.pld import common
from dp_accounting.pld import privacy_loss_distribution as pld
from dp_accounting.rdp import rdp_privacy_accountant as rdpa
from hypothesis import given, settings
from hypothesis import strategies as st

from app.accounting.closed_forms import bounded_range_rho, rr_rdp
from app.accounting.curve import compose
from app.accounting.filters import Budget, Filter, FilterKind, spend
from app.accounting.mechanisms import mechanism_from_dict
from app.accounting.orders import DPACC_DEFAULT_ORDERS, ORDERS
from app.accounting.registry import mechanisms_from_dp_event

mp.mp.dps = 50
FAST = settings(max_examples=30, deadline=None)
SAMPLE = [i for i, a in enumerate(ORDERS) if a in (1.1, 1.5, 2.0, 3.7, 10.0, 32.0, 256.0, 4000.0)]


def _m(kind: str, **params):
    return mechanism_from_dict({"mechanism": kind, **params})


def _rr_divergence(eps: float, alpha: float) -> mp.mpf:
    """D_alpha between the two output distributions of binary randomized response."""
    e, a = mp.mpf(eps), mp.mpf(alpha)
    p = mp.e**e / (1 + mp.e**e)
    return mp.log(p**a * (1 - p) ** (1 - a) + (1 - p) ** a * p ** (1 - a)) / (a - 1)


# --- pure_dp ----------------------------------------------------------------------------------


@pytest.mark.parametrize("eps", [1e-6, 0.01, 0.5, 1.0, 3.0, 20.0])
def test_pure_dp_is_the_randomized_response_curve(eps: float) -> None:
    from autodp import rdp_bank

    c = _m("pure_dp", epsilon=eps).curve()
    for j in SAMPLE:
        a = float(ORDERS[j])
        exact = _rr_divergence(eps, a)
        assert c.rdp[j] >= exact  # attained by binary RR, so it cannot be lower
        assert float(c.rdp[j]) == pytest.approx(float(exact), rel=1e-12, abs=1e-300)
        if eps >= 0.01:  # autodp's sinh form (the same bound, BS16 Prop 19) cancels below
            assert float(c.rdp[j]) == pytest.approx(rdp_bank.RDP_pureDP({"eps": eps}, a), rel=1e-9)
    assert c.rho == pytest.approx(eps * math.tanh(eps / 2), rel=1e-15)
    assert c.pure_eps == eps and c.delta == 0 and not c.gaussian_only


def test_pure_dp_spends_no_more_than_its_epsilon() -> None:
    c = _m("pure_dp", epsilon=0.3, count=10).curve()
    assert spend(FilterKind.RDP, c, 1e-9).epsilon <= 3.0 * (1 + 1e-15)
    assert spend(FilterKind.RDP_UNION_BOUND, c, 1e-9).epsilon <= 3.0 * (1 + 1e-15)


# --- exponential (bounded range) ------------------------------------------------------------


def _worst_two_point(eta: float, alpha: float) -> float:
    """max over the two-point eta-bounded-range family (the worst case at each order,
    docs/formulas.md §1.7) of D_alpha, in 50 digits: Q = (q, 1 - q), losses t + eta and t."""
    e, a = mp.mpf(eta), mp.mpf(alpha)

    def div(q: mp.mpf) -> mp.mpf:
        t = -mp.log(q * mp.e**e + 1 - q)
        return mp.log(q * mp.e ** (a * (t + e)) + (1 - q) * mp.e ** (a * t)) / (a - 1)

    grid = [mp.mpf(k) / 400 for k in range(1, 400)]
    best = max(grid, key=div)
    lo, hi = max(best - mp.mpf(1) / 400, mp.mpf(10) ** -30), min(best + mp.mpf(1) / 400, 1)
    for _ in range(150):  # ternary search for the maximum around the best grid point
        m1, m2 = lo + (hi - lo) / 3, hi - (hi - lo) / 3
        lo, hi = (m1, hi) if div(m1) < div(m2) else (lo, m2)
    return float(max(div(best), div((lo + hi) / 2)))


@pytest.mark.parametrize(
    ("eta", "rho"), [(1.0, 0.123301561482), (4.0, 1.66984963351), (0.1, 0.00124982642746)]
)
def test_exponential_rho_golden_vectors(eta: float, rho: float) -> None:
    # docs/formulas.md §3.1 rows 36, 38, 39 (tight rho of eta-bounded range, HM25)
    assert _m("exponential", epsilon=eta).curve().rho == pytest.approx(rho, rel=1e-11)


@pytest.mark.parametrize(
    ("eta", "alpha", "value", "bound"),
    [
        (1.0, 2.0, 0.234472035173, 0.248301561482),  # row 37
        (0.1, 10.0, 0.0120846957288, 0.0124998264275),  # row 39
    ],
)
def test_exponential_rdp_golden_vectors(eta, alpha, value, bound) -> None:
    got = _m("exponential", epsilon=eta).curve().rdp[int(np.flatnonzero(ORDERS == alpha)[0])]
    assert value * (1 - 1e-11) <= got <= bound


@pytest.mark.parametrize("eta", [0.1, 1.0, 4.0])
def test_exponential_curve_bounds_the_worst_bounded_range_pair(eta: float) -> None:
    c = _m("exponential", epsilon=eta).curve()
    for j in SAMPLE[:6]:
        assert c.rdp[j] >= _worst_two_point(eta, float(ORDERS[j])) * (1 - 1e-12)
    # tighter than the same epsilon as generic pure DP
    assert (c.rdp <= _m("pure_dp", epsilon=eta).curve().rdp).all()
    assert c.rho <= eta * eta / 8 and c.pure_eps == eta


@pytest.mark.parametrize("eta", [1e-100, 1e-150, 1e-160, 1e-200, 5e-324])
def test_bounded_range_rho_at_an_eta_whose_square_underflows(eta: float) -> None:
    """The series behind ``bounded_range_rho`` stopped when a term fell below 1e-18 of the sum;
    once eta^2 / 2 is subnormal, the next term and 1e-18 of the sum both round to 0 and the
    loop never ended (eta = 1e-160 hung). The answer must end, be at least the exact
    c - 1 - log c (mpmath, enough digits for the cancellation) and at most eta^2 / 8 [CR21]."""
    with mp.workdps(800):
        e = mp.mpf(eta)
        c = e / mp.expm1(e)
        exact = c - 1 - mp.log(c)
    got = bounded_range_rho(eta)
    assert mp.mpf(got) >= exact > 0
    assert got <= math.nextafter(math.nextafter(eta * eta / 8 * (1 + 2**-50), 1), 1)


TIGHT_ORDERS = [1.01, 1.05, 1.5, 2.0, 3.0, 7.7, 15.0, 77.0, 1024.0, float(ORDERS[-1])]


@pytest.mark.parametrize(("eta", "tol"), [(0.01, 2e-7), (0.1, 2e-9), (1.0, 2e-9), (20.0, 2e-9)])
def test_exponential_curve_is_the_exact_bounded_range_curve(eta: float, tol: float) -> None:
    """The stored curve is the supremum over the two-point family (the worst eta-BR pair at
    each order), found by a 50-digit search over q, never below it and above it by at most
    ``tol`` (the rounding margin; larger where eta is small and the closed form's terms
    cancel). The curve before version 2 (rho_BR * alpha) was up to 1.5x above it."""
    c = _m("exponential", epsilon=eta).curve()
    for alpha in TIGHT_ORDERS:
        j = int(np.flatnonzero(ORDERS == alpha)[0])
        exact = _worst_two_point(eta, alpha)
        assert exact <= c.rdp[j] <= exact * (1 + tol), (alpha, c.rdp[j], exact)


def _two_point_composed_epsilon(eta: float, q: float, n: int, delta: float) -> float:
    """Exact epsilon at ``delta`` of n copies of one two-point eta-BR pair (Q = (q, 1 - q),
    losses t + eta and t), both directions: the loss of the composition is n t + k eta with
    k ~ Binomial(n, .) under each side, and delta(eps) = sum_k [P(k) - e^eps Q(k)]_+ is
    bisected. Any sound epsilon for n eta-BR mechanisms is at least this."""
    e = mp.mpf(eta)
    q = mp.mpf(q)
    p1 = q * mp.e**e / (q * mp.e**e + 1 - q)  # P's mass on the point of loss t + eta

    def hockey(eps: mp.mpf, a: mp.mpf, b: mp.mpf) -> mp.mpf:
        tot = mp.mpf(0)
        for k in range(n + 1):
            pk = mp.binomial(n, k) * a**k * (1 - a) ** (n - k)
            qk = mp.binomial(n, k) * b**k * (1 - b) ** (n - k)
            tot += max(pk - mp.e**eps * qk, 0)
        return tot

    def eps_at(a: mp.mpf, b: mp.mpf) -> float:
        lo, hi = mp.mpf(0), mp.mpf(n * eta)
        for _ in range(80):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if hockey(mid, a, b) > delta else (lo, mid)
        return float(lo)

    return max(eps_at(p1, q), eps_at(q, p1))


def test_exponential_composition_is_sound_and_tighter_than_the_tight_rho_curve() -> None:
    """10 x exponential(1) at delta = 1e-6: never below the exact composition of any single
    worst-case pair (a lower bound on every sound answer, over a grid of q), and below what the
    curve rho_BR * alpha (the least bound before version 2) gives with the same conversion."""
    got = spend(FilterKind.RDP, compose([_m("exponential", epsilon=1.0, count=10).curve()]), 1e-6)
    lower = max(_two_point_composed_epsilon(1.0, q, 10, 1e-6) for q in (0.12, 0.13, 0.14, 0.15))
    old = replace(
        _m("exponential", epsilon=1.0, count=10).curve(),
        rdp=10 * np.minimum(bounded_range_rho(1.0) * ORDERS, rr_rdp(ORDERS, 1.0, 2)),
    )
    before = spend(FilterKind.RDP, compose([old]), 1e-6).epsilon
    assert lower <= got.epsilon < before * 0.9, (lower, got, before)


@settings(max_examples=60, deadline=None)
@given(
    st.floats(min_value=1e-9, max_value=100.0),
    st.floats(min_value=1e-9, max_value=100.0),
)
def test_exponential_curve_is_monotone_in_epsilon_and_order(e1: float, e2: float) -> None:
    lo, hi = sorted((e1, e2))
    a, b = _m("exponential", epsilon=lo).curve().rdp, _m("exponential", epsilon=hi).curve().rdp
    assert (a <= b).all()
    assert (np.diff(a) >= 0).all() and (np.diff(b) >= 0).all()


# --- zcdp ----------------------------------------------------------------------------------------


def test_zcdp_curve_and_dp_accounting_event() -> None:
    c = _m("zcdp", rho=0.01, xi=0.002, count=3).curve()
    np.testing.assert_allclose(c.rdp, 3 * (0.002 + 0.01 * ORDERS), rtol=1e-14)
    assert c.rho == pytest.approx(0.036) and c.pure_eps == math.inf
    assert _m("zcdp", rho=0.0, xi=0.5).curve().pure_eps == 0.5
    event = dp_event.SelfComposedDpEvent(dp_event.ZCDpEvent(0.01, 0.002), 3)
    acc = rdpa.RdpAccountant()
    acc.compose(event)
    ours = compose(
        [
            m.curve()
            for m in mechanisms_from_dp_event(
                {
                    "type": "SelfComposedDpEvent",
                    "count": 3,
                    "event": {"type": "ZCDpEvent", "rho": 0.01, "xi": 0.002},
                }
            )
        ]
    )
    idx = [int(np.flatnonzero(ORDERS == a)[0]) for a in DPACC_DEFAULT_ORDERS]
    np.testing.assert_allclose(ours.rdp[idx], acc._rdp, rtol=1e-13)  # noqa: SLF001


def test_zcdp_with_delta_spends_at_what_is_left() -> None:
    plain = _m("zcdp", rho=0.05).curve()
    approx = _m("zcdp", rho=0.05, delta=4e-7).curve()
    assert approx.delta == 4e-7
    s = spend(FilterKind.ZCDP, approx, 1e-6)
    assert s.epsilon == spend(FilterKind.ZCDP, plain, 6e-7).epsilon


# --- rdp -----------------------------------------------------------------------------------------


def test_rdp_takes_the_value_of_the_next_given_order_at_or_above_each_grid_order() -> None:
    c = _m("rdp", orders=[16, 2, 8, 4], epsilons=[1.3, 0.1, 0.5, 0.2]).curve()
    expect = np.where(ORDERS <= 2, 0.1, np.where(ORDERS <= 4, 0.2, np.where(ORDERS <= 8, 0.5, 1.3)))
    expect = np.where(ORDERS <= 16, expect, np.inf)
    np.testing.assert_allclose(c.rdp, expect, rtol=1e-15)
    assert (c.rdp >= expect).all()
    assert c.rho == math.inf and c.pure_eps == math.inf
    # not non-decreasing: still the next given order's own value (the rule; a smaller
    # value at a higher order is not carried down)
    c = _m("rdp", orders=[2, 4, 8], epsilons=[0.5, 0.9, 0.4]).curve()
    expect = np.where(ORDERS <= 2, 0.5, np.where(ORDERS <= 4, 0.9, 0.4))
    np.testing.assert_allclose(c.rdp[ORDERS <= 8], expect[ORDERS <= 8], rtol=1e-15)
    assert (c.rdp[ORDERS <= 8] >= expect[ORDERS <= 8]).all()
    assert np.isinf(c.rdp[ORDERS > 8]).all()
    # a decreasing list, [2, 4, 8, 16] -> [1, 0.5, 0.3, 0.2]: 1.0 up to order 2 (an audit found
    # 0.2 there, the least value above, before this rule was followed literally)
    c = _m("rdp", orders=[2, 4, 8, 16], epsilons=[1.0, 0.5, 0.3, 0.2]).curve()
    assert c.rdp[ORDERS <= 2].min() == pytest.approx(1.0, rel=1e-15)
    assert c.rdp[(ORDERS > 8) & (ORDERS <= 16)].max() == pytest.approx(0.2, rel=1e-15)


def test_rdp_spend_uses_the_finite_orders_and_its_delta() -> None:
    orders = [1.5, 2, 3, 5, 8, 16, 32, 64]
    eps = [0.05 * a for a in orders]  # a Gaussian with rho 0.05 given at 8 orders
    c = _m("rdp", orders=orders, epsilons=eps, delta=1e-7).curve()
    g = _m("gaussian", sigma=math.sqrt(10.0)).curve()
    ours = spend(FilterKind.RDP, c, 1e-6)
    on_grid = spend(FilterKind.RDP, g, 9e-7).candidates["rdp_improved"]
    assert ours.epsilon >= on_grid * (1 - 1e-12)  # fewer orders: never tighter
    assert ours.epsilon == pytest.approx(on_grid, rel=0.05)
    assert math.isfinite(ours.epsilon) and ours.method == "rdp_improved"


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"orders": [1.0, 2.0], "epsilons": [0.1, 0.2]}, "orders\\[0\\] must be > 1"),
        ({"orders": [2.0, 3.0], "epsilons": [0.1]}, "differ in length"),
        ({"orders": [2.0, 2.0], "epsilons": [0.1, 0.2]}, "distinct"),
        ({"orders": [2.0], "epsilons": [-0.1]}, "epsilons\\[0\\] must be in"),
        ({"orders": [], "epsilons": []}, "orders must not be empty"),
        ({"orders": [2.0], "epsilons": [0.1], "delta": 1.0}, "delta must be < 1"),
    ],
)
def test_rdp_validation(params: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _m("rdp", **params)


# --- approx_dp -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("eps", "delta", "k", "target"),
    [(0.5, 1e-8, 20, 1e-6), (1.0, 1e-7, 5, 1e-5), (0.1, 1e-9, 100, 1e-6), (2.0, 0.0, 3, 1e-6)],
)
def test_approx_dp_never_below_the_optimal_composition(eps, delta, k, target) -> None:
    """dp_accounting's PLD of (eps, delta) composes exactly (its worst-case pair, rounded
    pessimistically): our epsilon at the same target delta is never below it."""
    ours = spend(FilterKind.RDP, _m("approx_dp", epsilon=eps, delta=delta, count=k).curve(), target)
    theirs = (
        pld.from_privacy_parameters(
            common.DifferentialPrivacyParameters(eps, delta), value_discretization_interval=1e-4
        )
        .self_compose(k)
        .get_epsilon_for_delta(target)
    )
    assert ours.epsilon >= theirs
    assert ours.epsilon <= k * eps  # never worse than basic composition
    ed = mechanisms_from_dp_event({"type": "EpsilonDeltaDpEvent", "epsilon": eps, "delta": delta})
    assert ed == [_m("approx_dp", epsilon=eps, delta=delta)]


def test_approx_dp_deltas_reach_the_budget() -> None:
    f = Filter.create(FilterKind.RDP, Budget(10.0, 1e-6))
    step = _m("approx_dp", epsilon=0.1, delta=2e-7).curve()
    assert f.admits(step.scaled(4))
    assert not f.admits(step.scaled(5))  # the deltas alone reach 1e-6
    assert f.spend(step.scaled(5)).epsilon == math.inf


# --- properties ------------------------------------------------------------------------------


@st.composite
def generic(draw: st.DrawFn):
    kind = draw(st.sampled_from(["pure_dp", "exponential", "zcdp", "rdp", "approx_dp"]))
    n = draw(st.integers(1, 20))
    eps = draw(st.floats(0.01, 5.0))
    if kind == "zcdp":
        return _m(kind, rho=eps / 10, delta=draw(st.sampled_from([0.0, 1e-9])), count=n)
    if kind == "rdp":
        return _m(kind, orders=[2.0, 10.0, 1000.0], epsilons=[eps, 2 * eps, 3 * eps], count=n)
    if kind == "approx_dp":
        return _m(kind, epsilon=eps, delta=draw(st.floats(0.0, 1e-8)), count=n)
    return _m(kind, epsilon=eps, count=n)


@FAST
@given(st.lists(generic(), min_size=1, max_size=5))
def test_composition_and_deltas_are_additive(ms: list) -> None:
    total = compose([m.curve() for m in ms])
    with np.errstate(invalid="ignore"):
        rdp_sum = np.sum([m.curve().rdp for m in ms], axis=0)
    np.testing.assert_allclose(total.rdp, rdp_sum, rtol=1e-12)
    assert total.delta >= sum(m.curve().delta for m in ms) * (1 - 1e-15)
    assert total.delta == pytest.approx(sum(m.curve().delta for m in ms), rel=1e-12)


@FAST
@given(
    st.sampled_from(["pure_dp", "exponential", "approx_dp"]),
    st.floats(0.01, 50.0),
    st.floats(1.001, 2.0),
)
def test_monotone_in_epsilon(kind: str, eps: float, factor: float) -> None:
    extra = {"delta": 1e-9} if kind == "approx_dp" else {}
    lo = _m(kind, epsilon=eps, **extra).curve()
    hi = _m(kind, epsilon=min(eps * factor, 100.0), **extra).curve()
    assert (lo.rdp <= hi.rdp).all() and lo.rho <= hi.rho


@FAST
@given(st.floats(0.0, 1e-3), st.floats(0.0, 1e-3))
def test_monotone_in_delta(d1: float, d2: float) -> None:
    lo, hi = sorted((d1, d2))
    a = spend(FilterKind.RDP, _m("approx_dp", epsilon=1.0, delta=lo).curve(), 0.01)
    b = spend(FilterKind.RDP, _m("approx_dp", epsilon=1.0, delta=hi).curve(), 0.01)
    assert a.epsilon <= b.epsilon
