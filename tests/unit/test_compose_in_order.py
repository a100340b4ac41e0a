"""``compose_in_order`` is bit for bit the fold of ``PrivacyCurve.__add__`` (the running totals'
arithmetic), including infinite values and the delta cap."""

from __future__ import annotations

import platform
import random
import sys
import threading
from fractions import Fraction

import numpy as np
import pytest

from app.accounting.compose import _in_order_software, compose_in_order
from app.accounting.curve import PrivacyCurve
from app.accounting.kinds import UnitCurves
from app.accounting.mechanisms import mechanism_from_dict
from app.accounting.orders import ORDERS
from app.accounting.rounding import rounding_upward


def test_equals_the_fold_of_additions() -> None:
    rnd = random.Random(12)
    wires = (
        [{"mechanism": "gaussian", "sigma": rnd.uniform(0.5, 50)} for _ in range(40)]
        + [{"mechanism": "laplace", "epsilon": rnd.uniform(1e-4, 2)} for _ in range(40)]
        + [{"mechanism": "approx_dp", "epsilon": 0.1, "delta": 0.07}] * 20  # deltas reach 1
        + [{"mechanism": "rdp", "orders": [2, 3], "epsilons": [0.1, 0.2]}]  # infinite above 3
        + [{"mechanism": "subsampled_gaussian", "sigma": 1.1, "sample_rate": 0.01, "steps": 9}]
    )
    rnd.shuffle(wires)
    curves = [mechanism_from_dict(w).curve() for w in wires]
    folded = PrivacyCurve.zero()
    for c in curves:
        folded = folded + c
    fast = compose_in_order(UnitCurves.stack(curves))
    assert fast == folded and fast.delta == 1.0
    assert compose_in_order(UnitCurves.stack(curves[:1])) == curves[0]


# --- the hardware's upward rounding (``rounding_upward``) -----------------------------------


def _rows(rng: np.random.Generator, n: int) -> UnitCurves:
    """Curves whose sums round at every step: magnitudes from subnormal (1e-315) to 1e12 and
    near overflow (6e307: a few of them overflow to infinity), zeros, infinite RDP orders and
    pure epsilons, deltas that pass 1 part way."""
    m = ORDERS.size
    scale = rng.choice([1e-315, 1e-300, 1e-12, 1e-3, 1.0, 1e12], size=(n, 1))
    scale[rng.random((n, 1)) < 0.002] = 6e307
    with np.errstate(over="ignore"):
        rdp = rng.exponential(1.0, (n, m)) * scale
    rdp[rng.random((n, m)) < 0.01] = 0.0
    rdp[rng.integers(0, n), rng.integers(0, m, 5)] = np.inf
    pure = rng.exponential(1e-2, n)
    pure[rng.random(n) < 0.05] = np.inf
    return UnitCurves(
        rho=rng.exponential(1e-3, n) * scale[:, 0],
        rdp=rdp,
        pure_eps=pure,
        delta=rng.exponential(3.0 / n, n),
        gaussian_only=np.zeros(n, dtype=bool),
    )


def test_the_hardware_path_is_the_software_sums_bit_for_bit() -> None:
    rng = np.random.default_rng(7)
    subnormal = _rows(rng, 300)
    subnormal.rdp[:] = rng.integers(1, 2**40, subnormal.rdp.shape) * 5e-324  # sums subnormal
    cases = [_rows(rng, n) for n in (1, 2, 3, 257, 5_000)] + [subnormal]
    m = ORDERS.size
    for curves in cases:
        fast = compose_in_order(curves)
        rows = np.column_stack((curves.rdp, curves.rho, curves.pure_eps, curves.delta))
        slow = _in_order_software(rows)
        assert np.array_equal(fast.rdp, slow[:m])
        assert (fast.rho, fast.pure_eps, fast.delta) == (slow[m], slow[m + 1], slow[m + 2])
    # what the cases reached: sums that overflowed to infinity, sums that stayed subnormal, a
    # delta capped at 1; and each sum rounded up, never below the exact (rational) sum
    big = compose_in_order(cases[4])
    assert np.isinf(big.rdp).sum() > 5 and big.delta == 1.0
    assert 0.0 < compose_in_order(subnormal).rdp.max() < 2.2e-308
    exact = sum((Fraction(float(x)) for x in cases[4].rho), Fraction(0))
    assert Fraction(big.rho) >= exact


def test_the_hardware_rounds_up_here_and_the_mode_is_restored() -> None:
    """On Linux x86-64 and arm64 (every machine this project runs on) the fast path is taken;
    the mode is restored after the block, also when it raises, and other threads never see it."""
    if sys.platform == "linux" and platform.machine().lower() in {"x86_64", "aarch64"}:
        with rounding_upward() as upward:
            assert upward
            assert np.add(np.ones(3), 2.0**-60)[0] > 1.0
    with pytest.raises(RuntimeError), rounding_upward():
        raise RuntimeError
    assert 1.0 + 2.0**-60 == 1.0 and np.add(np.ones(70), 2.0**-60).max() == 1.0

    inside, seen = threading.Event(), threading.Event()
    other: list[float] = []

    def hold_the_mode() -> None:
        with rounding_upward():
            inside.set()
            seen.wait()

    t = threading.Thread(target=hold_the_mode)
    t.start()
    inside.wait()
    other.append(float(np.add(np.ones(70), 2.0**-60).max()))
    seen.set()
    t.join()
    assert other == [1.0]
