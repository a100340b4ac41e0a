"""``pure_dp``: any epsilon-DP mechanism, charged at the worst case over all of them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from app.accounting.closed_forms import binary_rr_rho_array, rr_rdp
from app.accounting.curve import Vector
from app.accounting.kinds._spec import (
    MAX_EPSILON,
    MIN_EPSILON,
    KindSpec,
    Mechanism,
    NextQuery,
    UnitCurves,
    param,
)
from app.accounting.orders import ORDERS


def pure_dp_curves(epsilon: Vector, delta: Vector | float = 0.0) -> UnitCurves:
    """The tight curve of the worst epsilon-DP mechanism (binary randomized response):
    eps(alpha) = log((e^{alpha eps} + e^{(1 - alpha) eps}) / (e^eps + 1)) / (alpha - 1)
    [HM25 Prop 7; S24 Thm 4; the intermediate bound in the proof of BS16 Prop 19 / 3.3],
    rho = eps tanh(eps / 2) [S24 Thm 5; HM25 Prop 8], pure eps = eps."""
    return UnitCurves.of(
        binary_rr_rho_array(epsilon), rr_rdp(ORDERS, epsilon[:, None], 2), epsilon, delta
    )


@dataclass(frozen=True, slots=True)
class PureDP(Mechanism):
    """Any epsilon-DP mechanism (sparse vector, report-noisy-max, a Tumult or OpenDP measurement
    with a pure guarantee, ...), charged at the worst case: binary randomized response with
    parameter epsilon attains every bound of ``pure_dp_curves`` (RDP [HM25 Prop 7; S24 Thm 4],
    rho = eps tanh(eps / 2) [S24 Thm 5]), so none can be improved without knowing more.

    Neighbours: whatever relation the epsilon-DP guarantee was stated for.
    """

    kind: ClassVar[str] = "pure_dp"
    epsilon: float = param(
        help="The mechanism's pure differential privacy parameter.",
        minimum=MIN_EPSILON,
        maximum=MAX_EPSILON,
    )

    @classmethod
    def _raw_curves(cls, units: Sequence[PureDP]) -> UnitCurves:
        return pure_dp_curves(np.array([u.epsilon for u in units]))


SPEC = KindSpec(
    mechanism=PureDP,
    description="Any epsilon-DP mechanism, charged at the worst case over all of them.",
    neighbours="The relation its epsilon-DP guarantee was stated for.",
    pld="pure_dp",
    calibration={"epsilon": "max"},
    pure_calibration=True,
    title="Any ε-DP mechanism",
    next_query=NextQuery({}, "one invocation"),
    examples=KindSpec.Examples(
        valid=({"epsilon": 0.7}, {"epsilon": 0.5}, {"epsilon": 0.05}),
        edges=({"epsilon": 1e-6}, {"epsilon": 20.0}),
        calibration={"epsilon": ({"count": 2}, {})},
    ),
)
