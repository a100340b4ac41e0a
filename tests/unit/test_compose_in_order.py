"""``compose_in_order`` is bit for bit the fold of ``PrivacyCurve.__add__`` (the running totals'
arithmetic), including infinite values and the delta cap."""

from __future__ import annotations

import random

from app.accounting.compose import compose_in_order
from app.accounting.curve import PrivacyCurve
from app.accounting.kinds import UnitCurves
from app.accounting.mechanisms import mechanism_from_dict


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
