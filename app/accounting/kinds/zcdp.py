"""``zcdp``: a mechanism known only by its zero-concentrated DP guarantee."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from app.accounting.kinds._events import at, direct, number
from app.accounting.kinds._spec import (
    Affine,
    KindSpec,
    Mechanism,
    NextQuery,
    Translate,
    column,
    event_number,
    param,
)

MAX_RHO = 1e6


@dataclass(frozen=True, slots=True)
class ZCDP(Mechanism):
    """A (xi, rho)-zCDP mechanism: D_alpha <= xi + rho alpha for every alpha > 1 [BS16 Def 1]
    (an OpenDP or Tumult measurement's zCDP privacy map, a discrete Gaussian, ...). With
    ``delta`` > 0 it is delta-approximately (xi, rho)-zCDP [BS16 Def 8.1]: for every
    neighbouring pair the outputs are equal-weight mixtures (1 - delta) A + delta B with A
    (xi, rho)-zCDP (BS16's events can be thinned to exactly 1 - delta without changing the
    conditional distributions), and ``delta`` is carried beside the curve.

    Curve: RDP xi + rho alpha; zCDP parameter rho + xi (xi + rho alpha <= (xi + rho) alpha);
    pure DP infinite unless rho = 0 (then xi). Neighbours: the relation of the guarantee.
    """

    kind: ClassVar[str] = "zcdp"
    rho: float = param(help="The zCDP parameter rho.", minimum=0.0, maximum=MAX_RHO)
    xi: float = param(
        default=0.0,
        help="The additive xi of (xi, rho)-zCDP (usually 0).",
        minimum=0.0,
        maximum=MAX_RHO,
    )
    delta: float = param(
        default=0.0,
        help="Approximate zCDP: the probability the zCDP bound may fail (usually 0).",
        minimum=0.0,
        maximum=1.0,
        exclusive_maximum=True,
    )

    @classmethod
    def _affine(cls, units: Sequence[ZCDP]) -> Affine:
        rho = column(units, "rho")
        xi = column(units, "xi")
        pure = np.where(rho == 0.0, xi, math.inf)
        return Affine(rho, xi, rho + xi, pure, column(units, "delta"), False)


def _from_zcdp_event(event: Mapping[str, Any], translate: Translate) -> list[Mechanism]:
    """``ZCDpEvent(rho, xi = 0)``."""
    xi = event_number(event, "xi") if event.get("xi") is not None else 0.0
    return [ZCDP(rho=event_number(event, "rho"), xi=xi)]


def _check_zcdp_event(event: Mapping[str, Any], path: str, depth: int) -> Mapping[str, Any]:
    """rho and xi are the ledger's own fields: in their ranges."""
    where = at("ZCDpEvent", path)
    for name in ("rho", "xi"):
        value = number(event, name)
        if value is not None:
            direct(where, name, value, SPEC.param(name), path)
    return event


SPEC = KindSpec(
    mechanism=ZCDP,
    description="A mechanism known by its zCDP guarantee rho (optionally xi and delta).",
    neighbours="The relation its zCDP guarantee was stated for.",
    pld=None,
    no_pld="states only a divergence bound, from which no privacy loss distribution follows",
    calibration={"rho": "max"},
    dp_events={"ZCDpEvent": _from_zcdp_event},
    dp_event_checks={"ZCDpEvent": _check_zcdp_event},
    title="zCDP guarantee",
    next_query=NextQuery({}, "ξ = 0, no δ of its own"),
    examples=KindSpec.Examples(
        valid=({"rho": 0.02}, {"rho": 0.1}, {"rho": 1e-4}),
        edges=({"rho": 1e-9}, {"rho": 3.0}, {"rho": 0.01, "delta": 1e-8}),
        calibration={"rho": ({"xi": 0.01, "count": 2}, {})},
    ),
)
