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
from app.accounting.mechanisms import mechanism_from_dict
from tests.kind_examples import each_kind, edges, valid

BUDGETS = [0.1, 1.0, 1e3]


def test_the_minimum_is_the_smallest_normal_float() -> None:
    assert MIN_BUDGET_DELTA == np.finfo(np.float64).tiny
    assert math.isfinite(1.0 / MIN_BUDGET_DELTA)


@pytest.mark.parametrize("mech", each_kind())
@pytest.mark.parametrize("eps_budget", BUDGETS)
@pytest.mark.parametrize("kind", list(FilterKind))
def test_conversions_stay_finite_at_the_minimum(
    kind: FilterKind, eps_budget: float, mech: str
) -> None:
    """Every valid and extreme example each kind declares (``KindSpec.examples``). Refused,
    without a NaN: an entry with its own delta (it exceeds the least one: no epsilon is left),
    under the rho filters one without a finite rho (an ``rdp`` entry, known by a few orders),
    and under fixed orders one whose curve is infinite at the order fixed (past its last). The
    gdp filter takes Gaussians only."""
    budget = Budget(eps_budget, MIN_BUDGET_DELTA)
    f = Filter.create(kind, budget)
    bound = f.bound
    if kind in RHO_FILTERS:
        assert bound is not None and math.isfinite(bound) and bound > 0
    assert f.spend_at(PrivacyCurve.zero(), MIN_BUDGET_DELTA).epsilon == 0.0
    assert f.spend(PrivacyCurve.zero()).epsilon == 0.0
    for wire in (*valid(mech), *edges(mech)):
        name = str(wire)
        curve = mechanism_from_dict(wire).curve()
        if kind is FilterKind.GDP and not curve.gaussian_only:
            continue
        reaches_no_order = (
            kind is FilterKind.RDP_FIXED_ORDERS
            and not np.isfinite(curve.rdp).all()
            and math.isinf(f.spend_at(curve, MIN_BUDGET_DELTA).epsilon)
        )
        if (
            curve.delta > 0
            or (kind in RHO_FILTERS and not math.isfinite(curve.rho))
            or reaches_no_order
        ):
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
