"""RunningSum: the held sum of active reservations stays >= the exact sum of the holds still
present through any sequence of additions and removals, and returns to exact zero."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from app.accounting.curve import PrivacyCurve
from app.accounting.kinds.approx_dp import ApproxDP
from app.accounting.mechanisms import Gaussian, Laplace, RandomizedResponse, SubsampledGaussian
from app.accounting.orders import ORDERS, ORDERS_VERSION
from app.accounting.running import RunningSum
from app.db.codec import held_from_bytes, held_to_bytes

CURVES = [
    Gaussian(sigma=3.0).curve(),
    Gaussian(sigma=0.7, sensitivity=2.0, count=5).curve(),
    Laplace(epsilon=0.1).curve(),
    Laplace(epsilon=1e-6, count=3).curve(),
    RandomizedResponse(epsilon=2.0, k=9).curve(),
    SubsampledGaussian(sigma=1.1, sample_rate=0.01, steps=100).curve(),
    ApproxDP(epsilon=0.5, delta=1e-7).curve(),
]


def _exact(terms: list[PrivacyCurve]) -> tuple[Fraction, list[Fraction], Fraction]:
    """Exact rational sums of the finite parts (rho, rdp, pure_eps)."""
    rho = sum((Fraction(c.rho) for c in terms if math.isfinite(c.rho)), Fraction(0))
    assert all(math.isfinite(c.delta) for c in terms)
    rdp = [sum((Fraction(float(c.rdp[j])) for c in terms), Fraction(0)) for j in range(ORDERS.size)]
    pure = sum((Fraction(c.pure_eps) for c in terms if math.isfinite(c.pure_eps)), Fraction(0))
    return rho, rdp, pure


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, len(CURVES) - 1)), max_size=40))
def test_never_below_the_exact_sum_of_what_is_held(ops: list[tuple[bool, int]]) -> None:
    held = RunningSum()
    present: list[PrivacyCurve] = []
    largest = np.zeros_like(ORDERS)  # the largest partial sum seen, order by order
    for n_ops, (add, i) in enumerate(ops, start=1):
        if add or not present:
            held = held.add(CURVES[i])
            present.append(CURVES[i])
        else:
            gone = present.pop(i % len(present))
            held = held.remove(gone)
        total = held.total()
        if not present:
            assert total is None and held.count == 0
            assert held.rho == 0.0 and held.pure_eps == 0.0 and not held.rdp.any()
            continue
        assert total is not None and held.count == len(present)
        rho, rdp, pure = _exact(present)
        assert (total.rho == math.inf) == any(math.isinf(c.rho) for c in present)
        assert (total.pure_eps == math.inf) == any(math.isinf(c.pure_eps) for c in present)
        assert total.gaussian_only == all(c.gaussian_only for c in present)
        if math.isfinite(total.rho):
            assert Fraction(total.rho) >= rho
        if math.isfinite(total.pure_eps):
            assert Fraction(total.pure_eps) >= pure
        assert Fraction(total.delta) >= sum((Fraction(c.delta) for c in present), Fraction(0))
        # spot-check every 16th order exactly (all orders: too slow in Fractions)
        for j in range(0, ORDERS.size, 16):
            assert Fraction(float(total.rdp[j])) >= rdp[j]
        # and the excess is rounding only: at most one ulp of the largest partial sum per step
        largest = np.maximum(largest, np.where(np.isinf(total.rdp), 0.0, total.rdp))
        excess = np.where(np.isinf(total.rdp), 0.0, total.rdp - [float(x) for x in rdp])
        assert (excess <= 2 * n_ops * np.spacing(largest)).all()


def test_infinite_parts_are_counted_not_summed() -> None:
    gauss, lap = CURVES[0], CURVES[2]
    held = RunningSum().add(gauss).add(lap)
    total = held.total()
    assert total is not None and math.isinf(total.pure_eps) and not total.gaussian_only
    held = held.remove(gauss)
    total = held.total()
    assert total is not None
    assert total.pure_eps >= lap.pure_eps and math.isfinite(total.pure_eps)
    assert np.array_equal(held.remove(lap).rdp, np.zeros_like(ORDERS))


def test_removing_from_an_empty_sum_is_an_error() -> None:
    try:
        RunningSum().remove(CURVES[0])
    except ValueError as exc:
        assert "empty" in str(exc)
    else:
        raise AssertionError("expected ValueError")


def test_codec_round_trip_is_exact() -> None:
    held = RunningSum()
    assert held_to_bytes(held) is None
    assert held_from_bytes(None, ORDERS_VERSION).count == 0
    for c in CURVES:
        held = held.add(c)
    back = held_from_bytes(held_to_bytes(held), ORDERS_VERSION)
    assert back.count == held.count and back.rho == held.rho and back.pure_eps == held.pure_eps
    assert back.rho_inf == held.rho_inf and back.pure_inf == held.pure_inf
    assert back.non_gaussian == held.non_gaussian
    assert np.array_equal(back.rdp, held.rdp) and np.array_equal(back.rdp_inf, held.rdp_inf)
