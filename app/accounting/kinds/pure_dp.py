"""``pure_dp``: any epsilon-DP mechanism, charged at the worst case over all of them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from app.accounting.closed_forms import binary_rr_rho, rr_rdp
from app.accounting.curve import PrivacyCurve
from app.accounting.kinds._spec import MAX_EPSILON, MIN_EPSILON, KindSpec, Mechanism, param
from app.accounting.orders import ORDERS


def pure_dp_curve(epsilon: float, delta: float = 0.0) -> PrivacyCurve:
    """The tight curve of the worst epsilon-DP mechanism (binary randomized response):
    eps(alpha) = log((e^{alpha eps} + e^{(1 - alpha) eps}) / (e^eps + 1)) / (alpha - 1)
    [HM25 Prop 7; S24 Thm 4; the intermediate bound in the proof of BS16 Prop 19 / 3.3],
    rho = eps tanh(eps / 2) [S24 Thm 5; HM25 Prop 8], pure eps = eps."""
    return PrivacyCurve(
        rho=binary_rr_rho(epsilon),
        rdp=rr_rdp(ORDERS, epsilon, 2),
        pure_eps=epsilon,
        gaussian_only=False,
        delta=delta,
    )


@dataclass(frozen=True)
class PureDP(Mechanism):
    """Any epsilon-DP mechanism (sparse vector, report-noisy-max, a Tumult or OpenDP measurement
    with a pure guarantee, ...), charged at the worst case: binary randomized response with
    parameter epsilon attains every bound of ``pure_dp_curve`` (RDP [HM25 Prop 7; S24 Thm 4],
    rho = eps tanh(eps / 2) [S24 Thm 5]), so none can be improved without knowing more.

    Neighbours: whatever relation the epsilon-DP guarantee was stated for.
    """

    kind: ClassVar[str] = "pure_dp"
    epsilon: float = param(
        help="The mechanism's pure differential privacy parameter.",
        minimum=MIN_EPSILON,
        maximum=MAX_EPSILON,
    )

    def _unit_curve(self) -> PrivacyCurve:
        return pure_dp_curve(self.epsilon)


SPEC = KindSpec(
    mechanism=PureDP,
    description="Any epsilon-DP mechanism, charged at the worst case over all of them.",
    neighbours="The relation its epsilon-DP guarantee was stated for.",
    calibration={"epsilon": "max"},
)
