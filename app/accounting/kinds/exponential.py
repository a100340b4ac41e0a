"""``exponential``: the exponential mechanism (epsilon-DP and epsilon-bounded range)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from app.accounting.closed_forms import bounded_range_rdp, bounded_range_rho, rr_rdp
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


@dataclass(frozen=True, slots=True)
class Exponential(Mechanism):
    """The exponential mechanism Pr[y] proportional to exp(-eps loss(y, x) / (2 Delta)), which is
    eps-DP and eps-bounded range [RS21 Lemma 3] (also any other eps-BR mechanism, e.g.
    report-noisy-max with Gumbel noise).

    rho = c - 1 - log c, c = eps / (e^eps - 1), the tight zCDP of eta-bounded range at eta = eps
    [HM25] (below eps^2 / 8 [CR21 section 3] and eps tanh(eps/2) for pure DP). RDP at each order:
    the exact RDP of eps-bounded range (``bounded_range_rdp``: the two-point worst case in
    closed form, docs/formulas.md §1.7), raised by its rounding bound; where eps is so small that
    the bound's margin is large, the least of it, rho * alpha (that tight zCDP), the
    bounded-range curve rho + (alpha - 1) eps^2 / 8 [CR21 section 3: Hoeffding's lemma on the
    privacy loss, KL <= rho] and the pure-DP worst case (binary randomized response at eps)
    [HM25 Prop 7], each valid on its own; then the least value at or above each order (RDP is
    non-decreasing in the order). Pure DP: eps.

    Neighbours: whatever relation the loss function's sensitivity Delta is stated for.
    """

    kind: ClassVar[str] = "exponential"
    epsilon: float = param(
        help="Epsilon of the mechanism (it is epsilon-DP and epsilon-bounded range).",
        minimum=MIN_EPSILON,
        maximum=MAX_EPSILON,
    )

    @classmethod
    def _raw_curves(cls, units: Sequence[Exponential]) -> UnitCurves:
        """Every unit's curve at once (rows; the same numbers as one by one)."""
        eps = np.array([u.epsilon for u in units], dtype=np.float64)
        rho = np.array([bounded_range_rho(float(e)) for e in eps])
        e, r = eps[:, None], rho[:, None]
        bounded_range = r + (ORDERS - 1.0) * (e * e / 8.0)
        rdp = np.minimum(np.minimum(r * ORDERS, bounded_range), rr_rdp(ORDERS, e, 2))
        rdp = np.minimum(rdp, bounded_range_rdp(ORDERS, e))
        # RDP is non-decreasing in the order: a bound at a higher order holds at every lower one
        rdp = np.minimum.accumulate(rdp[:, ::-1], axis=1)[:, ::-1]
        return UnitCurves.of(rho, rdp, eps)


SPEC = KindSpec(
    mechanism=Exponential,
    description="The exponential mechanism (selection by a noisy score): eps-DP and eps-BR.",
    neighbours="The relation the score's sensitivity is stated for.",
    pld="exponential",
    calibration={"epsilon": "max"},
    pure_calibration=True,
    title="Exponential mechanism",
    next_query=NextQuery({}, "one selection"),
    examples=KindSpec.Examples(
        valid=({"epsilon": 0.8}, {"epsilon": 1.0}, {"epsilon": 0.05}),
        edges=({"epsilon": 1e-6}, {"epsilon": 30.0}),
        calibration={"epsilon": ({"count": 2}, {})},
    ),
)
