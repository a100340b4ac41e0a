"""``rdp``: a mechanism known only by its Renyi DP guarantee at a few orders."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from app.accounting.curve import PrivacyCurve
from app.accounting.kinds._spec import KindSpec, Mechanism, param
from app.accounting.orders import ORDERS

MAX_GIVEN_ORDER = 1e12
MAX_GIVEN_EPSILON = 1e9
MAX_GIVEN_ORDERS = 1000


@dataclass(frozen=True, slots=True)
class RDP(Mechanism):
    """A mechanism with (alpha_j, eps_j)-RDP at given orders [M17 Def 4] (an OpenDP or Tumult
    measurement's RDP map, a mechanism analysed elsewhere). With ``delta`` > 0: delta-approximate
    RDP, the equal-weight mixture form of BS16 section 8 applied to a curve.

    On the grid: an order alpha takes eps_j of the next given order at or above it (the least
    alpha_j >= alpha), as the issue states the rule. D_alpha is non-decreasing in alpha [M17
    Prop 5; docs/formulas.md §0.1], so that value bounds D_alpha; nothing is ever interpolated
    downward. Orders above the largest given one get +inf (no bound), so rho and the pure-DP
    value are infinite too. Given epsilons that decrease somewhere are taken as given: a smaller
    value at a higher order is not carried down to lower ones (if every claim held, that would
    be sound and tighter, but a list that is not non-decreasing is not the RDP curve of any
    mechanism, and the next order's own value is the conservative reading of it).

    Neighbours: the relation of the guarantee.
    """

    kind: ClassVar[str] = "rdp"
    finite_curve: ClassVar[bool] = False
    orders: tuple[float, ...] = param(
        help="Renyi orders alpha_j > 1 of the guarantee (any order; no duplicates).",
        minimum=1.0,
        maximum=MAX_GIVEN_ORDER,
        exclusive_minimum=True,
        max_items=MAX_GIVEN_ORDERS,
    )
    epsilons: tuple[float, ...] = param(
        help="RDP values eps_j at those orders (same length).",
        minimum=0.0,
        maximum=MAX_GIVEN_EPSILON,
        max_items=MAX_GIVEN_ORDERS,
    )
    delta: float = param(
        default=0.0,
        help="Approximate RDP: the probability the RDP bound may fail (usually 0).",
        minimum=0.0,
        maximum=1.0,
        exclusive_maximum=True,
    )

    def validate(self) -> None:
        if len(self.orders) != len(self.epsilons):
            raise ValueError(
                f"rdp: orders and epsilons differ in length ({len(self.orders)} vs "
                f"{len(self.epsilons)})"
            )
        if len(set(self.orders)) != len(self.orders):
            raise ValueError(f"rdp: orders must be distinct, got {list(self.orders)}")

    def _unit_curve(self) -> PrivacyCurve:
        order = np.argsort(self.orders)
        given = np.asarray(self.orders, dtype=np.float64)[order]
        eps = np.asarray(self.epsilons, dtype=np.float64)[order]
        j = np.searchsorted(given, ORDERS, side="left")  # first given order >= alpha
        rdp = np.where(j < given.size, eps[np.minimum(j, given.size - 1)], math.inf)
        return PrivacyCurve(
            rho=math.inf, rdp=rdp, pure_eps=math.inf, gaussian_only=False, delta=self.delta
        )


SPEC = KindSpec(
    mechanism=RDP,
    description="A mechanism known by its Renyi DP values at a few orders (optionally delta).",
    neighbours="The relation its RDP guarantee was stated for.",
    pld=None,
    no_pld="states only a divergence bound, from which no privacy loss distribution follows",
    steep_curve=True,
    title="RDP guarantee",
    next_query=None,
    examples=KindSpec.Examples(
        valid=(
            {"orders": [2.0, 8.0, 64.0], "epsilons": [0.1, 0.3, 2.0]},
            {"orders": [2.0, 8.0, 64.0, 1e5], "epsilons": [0.1, 0.3, 2.0, 9.0]},
            {"orders": [2.0, 4.0, 8.0, 16.0], "epsilons": [0.001, 0.002, 0.004, 0.01]},
        ),
        edges=({"orders": [1.5, 32.0], "epsilons": [0.01, 1.5], "delta": 1e-9},),
    ),
)
