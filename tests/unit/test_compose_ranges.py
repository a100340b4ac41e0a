"""``compose_ranges``: per-position sums of curves over ranges (a partitioned ledger's blocks),
checked against a brute force: the exact sum (fractions) of the entries covering each position
lies within its bounds, a running total kept with round-up additions in ledger order (what the
charge path stores) is accepted, one moved by a part in 1e9 either way is not, and a rebuilt
bound with more charges added to it is accepted."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from app.accounting.compose import compose_ranges
from app.accounting.curve import PrivacyCurve
from app.accounting.kinds import UnitCurves
from app.accounting.mechanisms import mechanism_from_dict
from app.accounting.orders import ORDERS

CURVES = [
    mechanism_from_dict(m).curve()
    for m in (
        {"mechanism": "laplace", "epsilon": 0.013},
        {"mechanism": "laplace", "epsilon": 0.7},
        {"mechanism": "gaussian", "sigma": 3.0},
        {"mechanism": "approx_dp", "epsilon": 0.1, "delta": 1e-9},
        {"mechanism": "pure_dp", "epsilon": 0.3, "count": 3},
    )
]
M = ORDERS.size


def _moved(c: PrivacyCurve, rho: float = 1.0, rdp: float = 1.0) -> PrivacyCurve:
    return PrivacyCurve(
        rho=c.rho * rho,
        rdp=c.rdp * rdp,
        pure_eps=c.pure_eps,
        gaussian_only=c.gaussian_only,
        delta=c.delta,
    )


@pytest.mark.parametrize("seed", range(12))
def test_bounds_hold_the_exact_sum_and_accept_running_totals(seed: int) -> None:
    rng = np.random.default_rng(seed)
    groups = int(rng.integers(1, 30))
    which = rng.integers(0, len(CURVES), groups)
    counts = rng.integers(1, 4, groups)
    first = rng.integers(0, 40, groups) + 1000 * rng.integers(0, 2, groups)
    last = first + rng.integers(0, 15, groups)
    sums = compose_ranges(UnitCurves.stack(CURVES), which, counts, first, last)
    for p in range(int(first.min()) - 2, int(last.max()) + 3):
        cover = [
            (w, c) for w, c, a, b in zip(which, counts, first, last, strict=True) if a <= p <= b
        ]
        j = sums.segment(p)
        n = sum(int(c) for _, c in cover)
        assert (0 if j is None else int(sums.entries[j])) == n
        running = PrivacyCurve.zero()
        for w, c in cover:
            for _ in range(c):
                running = running + CURVES[w]
        if n == 0:
            assert sums.holds(None, running, 0)
            continue
        assert j is not None
        for column, value in (
            (M, lambda c: c.rho),
            (M + 1, lambda c: c.pure_eps),
            (3, lambda c: c.rdp[3]),
            (M - 1, lambda c: c.rdp[-1]),
        ):
            terms = [(float(value(CURVES[w])), int(c)) for w, c in cover]
            if any(not np.isfinite(x) for x, _ in terms):
                assert sums.lower[j][column] == sums.upper[j][column] == np.inf
                continue
            exact = sum(Fraction(x) * c for x, c in terms)
            assert Fraction(sums.lower[j][column]) <= exact <= Fraction(sums.upper[j][column])
        assert sums.holds(j, running, n)
        assert not sums.holds(j, _moved(running, rho=1 + 1e-9), n)
        assert not sums.holds(j, _moved(running, rdp=1 - 1e-9), n)
        # rebuilt (the upper bound written), then charged again: still within rounding
        rebuilt = sums.upper_curve(j)
        assert sums.holds(j, rebuilt, n)
        more = rebuilt
        extra = [(int(w), 1) for w in rng.integers(0, len(CURVES), 3)]
        for w, _ in extra:
            more = more + CURVES[w]
        after = compose_ranges(
            UnitCurves.stack(CURVES),
            np.append(which, [w for w, _ in extra]),
            np.append(counts, [1] * len(extra)),
            np.append(first, [p] * len(extra)),
            np.append(last, [p] * len(extra)),
        )
        k = after.segment(p)
        assert k is not None and after.holds(k, more, n + len(extra))


def test_no_groups() -> None:
    none = np.zeros(0, dtype=np.int64)
    sums = compose_ranges(UnitCurves.stack([]), none, none, none, none)
    assert sums.segment(0) is None
    assert sums.holds(None, PrivacyCurve.zero(), 0)
    assert not sums.holds(None, CURVES[0], 0)
