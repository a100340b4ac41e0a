"""Issue 10, item 4: the smallest budget delta accepted keeps every filter's conversions finite.

``MIN_BUDGET_DELTA`` (the smallest normal float) is checked here for every filter kind and every
mechanism kind, with ordinary and extreme parameters: the filter bound, the spend of an empty and
of a charged ledger are finite, never negative, and grow as delta shrinks; admission answers.
Below 2**-1024, ``1 / delta`` overflows and the Gaussian conversions were infinite (every Gaussian
charge answered 500): such budgets are refused, with the minimum named.
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest

from app.accounting import conversions as conv
from app.accounting.curve import PrivacyCurve
from app.accounting.filters import (
    MIN_BUDGET_DELTA,
    RHO_FILTERS,
    Budget,
    Filter,
    FilterKind,
)
from app.accounting.mechanisms import MECHANISMS, mechanism_from_dict

MECHANISM_CASES = {
    "gaussian": {"mechanism": "gaussian", "sigma": 3.0},
    "gaussian_little_noise": {"mechanism": "gaussian", "sigma": 1e-6},
    "gaussian_much_noise": {"mechanism": "gaussian", "sigma": 1e6, "count": 1000},
    "laplace": {"mechanism": "laplace", "epsilon": 0.5},
    "laplace_largest": {"mechanism": "laplace", "epsilon": 100.0, "count": 1000},
    "laplace_smallest": {"mechanism": "laplace", "epsilon": 1e-9},
    "randomized_response": {"mechanism": "randomized_response", "epsilon": 1.0, "k": 4},
    "rappor": {"mechanism": "rappor", "epsilon": 2.0},
    "subsampled_gaussian": {
        "mechanism": "subsampled_gaussian",
        "sigma": 1.1,
        "sample_rate": 0.01,
        "steps": 1000,
    },
    "discrete_laplace": {"mechanism": "discrete_laplace", "epsilon": 1.0, "sensitivity": 2},
    "pure_dp": {"mechanism": "pure_dp", "epsilon": 0.5},
    "exponential": {"mechanism": "exponential", "epsilon": 1.0},
    "zcdp": {"mechanism": "zcdp", "rho": 0.1},
    "rdp": {"mechanism": "rdp", "orders": [2.0, 8.0, 64.0, 1e5], "epsilons": [0.1, 0.3, 2.0, 9.0]},
    # its own delta exceeds the target delta: no epsilon is left at the minimum, only refusal
    "approx_dp": {"mechanism": "approx_dp", "epsilon": 0.5, "delta": 1e-9},
}
OWN_DELTA = {"approx_dp"}
NO_FINITE_RHO = {"rdp"}  # known by a few RDP orders only: the rho filters can only refuse it
BUDGETS = [0.1, 1.0, 1e3]


def test_every_mechanism_kind_is_covered() -> None:
    assert {m["mechanism"] for m in MECHANISM_CASES.values()} == set(MECHANISMS)


def test_the_minimum_is_the_smallest_normal_float() -> None:
    assert MIN_BUDGET_DELTA == np.finfo(np.float64).tiny
    assert math.isfinite(1.0 / MIN_BUDGET_DELTA)


def _cases(kind: FilterKind) -> list[str]:
    if kind is FilterKind.GDP:
        return [n for n, m in MECHANISM_CASES.items() if m["mechanism"] == "gaussian"]
    return sorted(MECHANISM_CASES)


@pytest.mark.parametrize("eps_budget", BUDGETS)
@pytest.mark.parametrize("kind", list(FilterKind))
def test_conversions_stay_finite_at_the_minimum(kind: FilterKind, eps_budget: float) -> None:
    budget = Budget(eps_budget, MIN_BUDGET_DELTA)
    f = Filter.create(kind, budget)
    bound = f.bound
    if kind in RHO_FILTERS:
        assert bound is not None and math.isfinite(bound) and bound > 0
    assert f.spend_at(PrivacyCurve.zero(), MIN_BUDGET_DELTA).epsilon == 0.0
    assert f.spend(PrivacyCurve.zero()).epsilon == 0.0
    for name in _cases(kind):
        curve = mechanism_from_dict(MECHANISM_CASES[name]).curve()
        if name in OWN_DELTA or (kind in RHO_FILTERS and name in NO_FINITE_RHO):
            at_min = f.spend_at(curve, MIN_BUDGET_DELTA)
            assert not math.isnan(at_min.epsilon) and at_min.epsilon >= 0, (name, at_min)
            assert not f.admits(curve)
            continue
        at_min = f.spend_at(curve, MIN_BUDGET_DELTA)
        assert math.isfinite(at_min.epsilon) and at_min.epsilon >= 0, (name, at_min)
        for candidate, value in at_min.candidates.items():
            assert not math.isnan(value) and value >= 0, (name, candidate, value)
        # a smaller delta never buys a smaller epsilon
        assert (
            at_min.epsilon >= f.spend_at(curve, 1e-300).epsilon >= f.spend_at(curve, 1e-10).epsilon
        )
        admitted = f.admits(curve)
        reported = f.spend(curve).epsilon
        assert math.isfinite(reported)
        if admitted and kind not in RHO_FILTERS:
            assert reported <= eps_budget


def _exact_gaussian_epsilon(mu: float, delta: float) -> mpmath.mpf:
    """The least epsilon with delta(epsilon) <= delta for mu-GDP [BW18 Thm 8], by bisection in
    100-digit arithmetic."""
    with mpmath.workdps(100):
        mu_, d = mpmath.mpf(mu), mpmath.mpf(delta)

        def delta_at(e: mpmath.mpf) -> mpmath.mpf:
            return mpmath.ncdf(-e / mu_ + mu_ / 2) - mpmath.exp(e) * mpmath.ncdf(-e / mu_ - mu_ / 2)

        lo, hi = mpmath.mpf(0), mu_ * mu_ / 2 + 2 * mu_ * mpmath.sqrt(mpmath.log(1 / d) / 2) + 1
        for _ in range(400):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if delta_at(mid) > d else (lo, mid)
        return hi


@pytest.mark.parametrize("sigma", [0.1, 1.0, 3.0, 10.0])
def test_exact_gaussian_conversion_at_the_minimum_matches_high_precision(sigma: float) -> None:
    mu = 1.0 / sigma
    ours = conv.gaussian_epsilon(mu, MIN_BUDGET_DELTA)
    exact = _exact_gaussian_epsilon(mu, MIN_BUDGET_DELTA)
    assert float(abs(ours - exact) / exact) < 1e-12


@pytest.mark.parametrize(
    "delta", [5e-324, 1e-310, 2.0**-1024, float(np.nextafter(MIN_BUDGET_DELTA, 0))]
)
def test_smaller_budget_deltas_are_refused_naming_the_minimum(delta: float) -> None:
    with pytest.raises(ValueError, match=repr(MIN_BUDGET_DELTA)):
        Budget(1.0, delta)
