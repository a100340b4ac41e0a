"""Property tests (hypothesis): composition laws, monotonicity, soundness, input validation."""

from __future__ import annotations

import math
import subprocess
import sys
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.accounting import conversions as conv
from app.accounting.curve import PrivacyCurve, compose
from app.accounting.filters import Budget, Filter, FilterKind, spend, spend_delta
from app.accounting.mechanisms import (
    DiscreteLaplace,
    Gaussian,
    Laplace,
    RandomizedResponse,
    Rappor,
    SubsampledGaussian,
    mechanism_from_dict,
)
from app.accounting.rounding import add_up, mul_up

FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

sigmas = st.floats(min_value=0.3, max_value=50.0)
epsilons = st.floats(min_value=0.01, max_value=10.0)
deltas = st.floats(min_value=1e-12, max_value=0.1)
counts = st.integers(min_value=1, max_value=1000)


@st.composite
def mechanisms(draw: st.DrawFn):
    kind = draw(st.sampled_from(["gaussian", "laplace", "rr", "rappor", "dlap"]))
    n = draw(st.integers(min_value=1, max_value=50))
    if kind == "gaussian":
        return Gaussian(sigma=draw(sigmas), sensitivity=draw(st.floats(0.1, 5.0)), count=n)
    if kind == "laplace":
        return Laplace(epsilon=draw(epsilons), count=n)
    if kind == "rr":
        return RandomizedResponse(epsilon=draw(epsilons), k=draw(st.integers(2, 6)), count=n)
    if kind == "rappor":
        return Rappor(epsilon=draw(epsilons), count=n)
    return DiscreteLaplace(epsilon=draw(epsilons), sensitivity=1, count=n)


@FAST
@given(st.lists(mechanisms(), min_size=1, max_size=5))
def test_composition_is_additive(ms: list) -> None:
    total = compose([m.curve() for m in ms])
    rdp_sum = np.sum([m.curve().rdp for m in ms], axis=0)
    np.testing.assert_allclose(total.rdp, rdp_sum, rtol=1e-12)
    assert total.rho == pytest.approx(sum(m.curve().rho for m in ms), rel=1e-12)
    assert total.pure_eps == pytest.approx(sum(m.curve().pure_eps for m in ms), rel=1e-12)
    # and never below the exact sum (upward rounding)
    assert (total.rdp >= rdp_sum * (1 - 1e-15)).all()


@FAST
@given(mechanisms(), st.integers(min_value=2, max_value=10_000))
def test_count_equals_repetition(m, n: int) -> None:
    once = m.curve()
    d = m.to_dict()
    d["count"] = m.count * n
    many = mechanism_from_dict(d).curve()
    np.testing.assert_allclose(many.rdp, once.rdp * n, rtol=1e-12)


@FAST
@given(sigmas, sigmas, st.floats(0.1, 5.0), deltas)
def test_more_noise_never_costs_more(s1: float, s2: float, sens: float, delta: float) -> None:
    lo, hi = sorted((s1, s2))
    a, b = (
        Gaussian(sigma=lo, sensitivity=sens).curve(),
        Gaussian(sigma=hi, sensitivity=sens).curve(),
    )
    assert (b.rdp <= a.rdp).all() and b.rho <= a.rho
    for kind in FilterKind:
        f = Filter.create(kind, Budget(1.0, 1e-6))
        assert f.spend_at(b, delta).epsilon <= f.spend_at(a, delta).epsilon + 1e-12


@FAST
@given(epsilons, epsilons, st.integers(2, 20))
def test_larger_epsilon_costs_more(e1: float, e2: float, k: int) -> None:
    lo, hi = sorted((e1, e2))
    for make in (
        lambda e: Laplace(epsilon=e),
        lambda e: RandomizedResponse(epsilon=e, k=k),
        lambda e: Rappor(epsilon=e),
        lambda e: DiscreteLaplace(epsilon=e, sensitivity=k),
    ):
        a, b = make(lo).curve(), make(hi).curve()
        assert (a.rdp <= b.rdp * (1 + 1e-12)).all()
        assert a.rho <= b.rho * (1 + 1e-9)


@FAST
@given(st.lists(mechanisms(), min_size=1, max_size=4), deltas, deltas)
def test_epsilon_decreases_as_delta_grows(ms: list, d1: float, d2: float) -> None:
    lo, hi = sorted((d1, d2))
    curve = compose([m.curve() for m in ms])
    for kind in (
        FilterKind.RDP,
        FilterKind.RDP_UNION_BOUND,
        FilterKind.ZCDP,
        FilterKind.ZCDP_FILTER,
    ):
        e_lo, e_hi = spend(kind, curve, lo).epsilon, spend(kind, curve, hi).epsilon
        assert e_hi <= e_lo + 1e-9
        assert e_lo >= 0 and not math.isnan(e_lo)


@FAST
@given(st.lists(st.tuples(sigmas, st.floats(0.1, 3.0)), min_size=1, max_size=6), deltas)
def test_spend_never_below_exact_gaussian(blocks: list, delta: float) -> None:
    curve = compose([Gaussian(sigma=s, sensitivity=d).curve() for s, d in blocks])
    mu = math.sqrt(sum((d / s) ** 2 for s, d in blocks))
    exact = conv.gaussian_epsilon(mu, delta)
    for kind in FilterKind:
        got = Filter.create(kind, Budget(1.0, 1e-6)).spend_at(curve, delta)
        assert got.epsilon >= exact * (1 - 1e-12)
        if kind in (FilterKind.GDP, FilterKind.RDP, FilterKind.ZCDP):
            assert got.method == "gaussian_exact"


@FAST
@given(st.lists(mechanisms(), min_size=1, max_size=4), st.floats(0.01, 30.0))
def test_delta_and_epsilon_directions_agree(ms: list, eps: float) -> None:
    curve = compose([m.curve() for m in ms])
    for kind in (FilterKind.RDP, FilterKind.ZCDP):
        d = spend_delta(kind, curve, eps).delta
        if 1e-300 < d < 0.5:  # near delta = 1 the inverse is ill-conditioned (but conservative)
            # the epsilon at that delta is at most eps (the two directions are the same bounds)
            assert spend(kind, curve, d).epsilon <= eps * (1 + 1e-6) + 1e-9


@FAST
@given(
    st.lists(st.floats(min_value=0, max_value=1e6, allow_subnormal=False), min_size=1, max_size=60)
)
def test_add_up_never_below_exact_sum(xs: list[float]) -> None:
    total = 0.0
    for x in xs:
        total = add_up(total, x)
    exact = sum(Fraction(x) for x in xs)
    assert Fraction(total) >= exact
    assert total <= float(exact) * (1 + len(xs) * 2.3e-16) + 1e-300


@FAST
@given(
    st.floats(allow_nan=True, allow_infinity=True), st.floats(allow_nan=True, allow_infinity=True)
)
def test_add_up_scalar_path_equals_the_array_path(a: float, b: float) -> None:
    """Two floats take a path without numpy; it gives numpy's answer bit for bit."""
    got = add_up(a, b)
    with np.errstate(invalid="ignore", over="ignore"):
        want = float(add_up(np.array([a]), np.array([b]))[0])
    assert type(got) is float
    assert (math.isnan(got) and math.isnan(want)) or got == want


@FAST
@given(st.floats(min_value=1e-200, max_value=1e200), st.integers(min_value=1, max_value=10**9))
def test_mul_up_never_below_exact_product(x: float, n: int) -> None:
    got = mul_up(x, float(n))
    assert Fraction(got) >= Fraction(x) * n
    assert got <= x * n * (1 + 4.5e-16)


def test_exact_sums_stay_exact() -> None:
    assert add_up(0.5, 0.5) == 1.0
    assert add_up(0.25, 0.5) == 0.75
    assert mul_up(0.25, 4.0) == 1.0


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: Gaussian(sigma=float("nan")), "sigma must be finite"),
        (lambda: Gaussian(sigma=float("inf")), "sigma must be finite"),
        (lambda: Gaussian(sigma=0.0), "sigma must be in"),
        (lambda: Gaussian(sigma=-1.0), "sigma must be in"),
        (lambda: Gaussian(sigma=1e308), "sigma must be in"),
        (lambda: Gaussian(sigma=1.0, count=0), "count must be an integer"),
        (lambda: Gaussian(sigma=1.0, count=10**12), "count must be an integer"),
        (lambda: Laplace(epsilon=1e-320), "epsilon must be in"),
        (lambda: RandomizedResponse(epsilon=1.0, k=1), "k must be an integer"),
        (
            lambda: SubsampledGaussian(sigma=1.0, sample_rate=0.0, steps=1),
            "sample_rate must be > 0",
        ),
        (lambda: SubsampledGaussian(sigma=1.0, sample_rate=1.5, steps=1), "sample_rate must be in"),
        (lambda: DiscreteLaplace(epsilon=1.0, sensitivity=2.5), "sensitivity must be an integer"),
        (lambda: mechanism_from_dict({"mechanism": "nope"}), "unknown mechanism 'nope'"),
        (lambda: mechanism_from_dict({"mechanism": "gaussian", "sigma": 1, "bogus": 2}), "bogus"),
        (lambda: Budget(0.0, 1e-5), "budget epsilon must be in"),
        (lambda: Budget(1e300, 1e-5), "budget epsilon must be in"),
        (lambda: Budget(1.0, 1.0), "delta must be in"),
        (lambda: conv.zcdp_epsilon_cks(0.1, 0.0), "delta must be in"),
        (lambda: conv.zcdp_delta_cks(0.1, -1.0), "epsilon must be finite and >= 0"),
        (lambda: spend(FilterKind.RDP, PrivacyCurve.zero(), float("nan")), "delta must be in"),
    ],
)
def test_bad_values_raise_value_error_naming_them(build, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        build()


def test_spend_of_empty_ledger_is_zero() -> None:
    for kind in FilterKind:
        assert (
            Filter.create(kind, Budget(1.0, 1e-6)).spend_at(PrivacyCurve.zero(), 1e-6).epsilon
            == 0.0
        )


def test_core_imports_no_web_or_database_code() -> None:
    code = (
        "import sys, app.accounting, app.accounting.calibration\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in "
        "('fastapi', 'sqlalchemy', 'pydantic', 'starlette', 'dp_accounting', 'opendp',"
        " 'autodp', 'mpmath')]\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
