"""``approx_dp``: any (epsilon, delta)-DP mechanism."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from app.accounting.kinds._events import at, direct, number
from app.accounting.kinds._spec import (
    MAX_EPSILON,
    KindSpec,
    Mechanism,
    Translate,
    UnitCurves,
    event_number,
    param,
)
from app.accounting.kinds.pure_dp import pure_dp_curves


@dataclass(frozen=True, slots=True)
class ApproxDP(Mechanism):
    """Any (epsilon, delta)-DP mechanism.

    Every (eps, delta)-DP pair of output distributions is a post-processing of the four-point
    "(eps, delta) randomized response" [Kairouz, Oh, Viswanath 2015, its characterisation of
    (eps, delta)-DP by that mechanism]: with probability delta it reveals the input, otherwise
    it is binary randomized response with parameter eps. So the mechanism is, for every
    neighbouring pair, the equal-weight mixture (1 - delta) A + delta B with A eps-DP: a
    delta-approximately ``pure_dp`` curve (BS16 section 8, approximate zCDP; the same reduction
    as dp_accounting's ``EpsilonDeltaDpEvent`` in its RDP accountant). The curve is the pure-DP
    worst case at eps, with ``delta`` carried beside it (``PrivacyCurve.delta``).

    Neighbours: whatever relation the guarantee was stated for.
    """

    kind: ClassVar[str] = "approx_dp"
    epsilon: float = param(
        help="The mechanism's epsilon (0 allowed: a delta-only guarantee).",
        minimum=0.0,
        maximum=MAX_EPSILON,
    )
    delta: float = param(
        help="The mechanism's delta: the probability its epsilon bound may fail.",
        minimum=0.0,
        maximum=1.0,
        exclusive_maximum=True,
    )

    @classmethod
    def _raw_curves(cls, units: Sequence[ApproxDP]) -> UnitCurves:
        eps = np.array([u.epsilon for u in units])
        return pure_dp_curves(eps, np.array([u.delta for u in units]))


def _from_epsilon_delta_event(event: Mapping[str, Any], translate: Translate) -> list[Mechanism]:
    """``EpsilonDeltaDpEvent(epsilon, delta)``."""
    return [ApproxDP(epsilon=event_number(event, "epsilon"), delta=event_number(event, "delta"))]


def _check_epsilon_delta_event(
    event: Mapping[str, Any], path: str, depth: int
) -> Mapping[str, Any]:
    """epsilon and delta are the ledger's own fields: in their ranges."""
    where = at("EpsilonDeltaDpEvent", path)
    for name in ("epsilon", "delta"):
        value = number(event, name)
        if value is not None:
            direct(where, name, value, SPEC.param(name), path)
    return event


SPEC = KindSpec(
    mechanism=ApproxDP,
    description="Any (epsilon, delta)-DP mechanism; its delta is added to the ledger's.",
    neighbours="The relation its (epsilon, delta)-DP guarantee was stated for.",
    pld="approx_dp",
    calibration={"epsilon": "max"},
    dp_events={"EpsilonDeltaDpEvent": _from_epsilon_delta_event},
    dp_event_checks={"EpsilonDeltaDpEvent": _check_epsilon_delta_event},
    pure_calibration=True,
    title="Any (ε, δ)-DP mechanism",
    next_query=None,
    examples=KindSpec.Examples(
        valid=(
            {"epsilon": 0.5, "delta": 1e-7},
            {"epsilon": 0.5, "delta": 1e-9},
            {"epsilon": 0.05, "delta": 1e-9},
        ),
        calibration={"epsilon": ({"delta": 1e-8, "count": 2}, {"delta": 1e-9})},
    ),
)
