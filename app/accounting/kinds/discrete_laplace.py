"""``discrete_laplace``: the discrete Laplace (two-sided geometric) mechanism on integers."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from app.accounting.closed_forms import (
    binary_rr_rho_array,
    discrete_laplace_kl,
    discrete_laplace_rdp,
    rho_from_curves,
    rr_rdp,
)
from app.accounting.curve import Vector
from app.accounting.kinds._events import (
    NO_NOISE,
    DpEventError,
    at,
    epsilon_in_range,
    number,
    outside,
    sign,
)
from app.accounting.kinds._spec import (
    MAX_EPSILON,
    MAX_K,
    MIN_EPSILON,
    RDP_EVAL_MARGIN,
    KindSpec,
    Mechanism,
    NextQuery,
    Translate,
    UnitCurves,
    event_number,
    param,
)
from app.accounting.orders import ORDERS
from app.accounting.rounding import mul_up


@dataclass(frozen=True, slots=True)
class DiscreteLaplace(Mechanism):
    """Discrete Laplace on Z: Pr[Z = z] = tanh(t/2) e^{-t|z|}, t = epsilon / Delta (eps-DP).

    Convention: integer-valued query with integer L1 ``sensitivity`` Delta; worst neighbour pair
    shifts by exactly Delta. RDP: closed form of docs/formulas.md §1.3 (Delta = 1 is binary RR).
    rho: the KL value eps - t (1 - e^{-eps}) / sinh t (the supremum is the alpha -> 1 limit,
    checked numerically for every instance; a larger interior value would be used instead).
    Both are capped by the curve of the worst eps-DP mechanism (``pure_dp``: binary randomized
    response, rho = eps tanh(eps / 2) [S24 Thm 5; HM25 Prop 7-8]), which decides where eps is so
    small that the closed form's rounding margin exceeds the divergence.
    """

    kind: ClassVar[str] = "discrete_laplace"
    epsilon: float = param(
        help="Epsilon of the mechanism: noise parameter t = epsilon / sensitivity.",
        minimum=MIN_EPSILON,
        maximum=MAX_EPSILON,
    )
    sensitivity: int = param(
        default=1, help="Integer L1 sensitivity of the query.", minimum=1, maximum=MAX_K
    )

    @classmethod
    def _raw_curves(cls, units: Sequence[DiscreteLaplace]) -> UnitCurves:
        """Every unit's curve at once (rows; the same numbers as one by one)."""
        eps = np.array([u.epsilon for u in units], dtype=np.float64)
        sens = np.array([u.sensitivity for u in units], dtype=np.float64)
        worst = binary_rr_rho_array(eps)  # binary RR: the worst eps-DP mechanism
        rho = worst.copy()  # sensitivity 1 is binary RR itself
        wide = np.flatnonzero(sens > 1)
        rdp = rr_rdp(ORDERS, eps[:, None], 2)
        if wide.size:
            e, d = eps[wide, None], sens[wide, None]
            pairs = zip(e[:, 0], d[:, 0], strict=True)
            kl = np.array([discrete_laplace_kl(float(x), int(y)) for x, y in pairs])

            # the formula loses precision as alpha -> 1 (absolute 1e-16 / (alpha - 1)), so the
            # scan starts at alpha = 1 + 1e-4, where f is within 1e-4 relative of the KL limit
            def curve(a: Vector) -> Vector:
                return discrete_laplace_rdp(a, e, d, margin=False)

            # an eps-DP mechanism is never above the worst one, binary RR (``pure_dp``): where
            # eps is small the scan's rounding noise (about 1e-16 / (alpha - 1) in eps(alpha))
            # exceeds the divergence itself, and alone it gave up to 10^6 times eps^2 / 2
            rho[wide] = np.minimum(rho_from_curves(curve, kl, e[:, 0], 1e-4), worst[wide])
            # likewise the closed form's rounding margin (8e-16 / (alpha - 1) or more) against
            # RR's
            rdp[wide] = np.minimum(discrete_laplace_rdp(ORDERS[None, :], e, d), rdp[wide])
        # eps(alpha) <= eps for an eps-DP mechanism; the cap keeps the margin from exceeding it
        cap = eps / (1.0 + RDP_EVAL_MARGIN)
        return UnitCurves.of(rho, np.minimum(rdp, cap[:, None]), eps)


def _from_discrete_laplace_event(event: Mapping[str, Any], translate: Translate) -> list[Mechanism]:
    """``DiscreteLaplaceDpEvent(noise_parameter a, sensitivity)``: Pr[z] proportional to
    e^{-a |z|}, so t = a and epsilon = a * sensitivity (rounded up: a float product may be half
    an ulp below it)."""
    a = event_number(event, "noise_parameter")
    sens = event_number(event, "sensitivity")
    if a <= 0 or sens < 1 or not sens.is_integer():
        raise ValueError(
            f"DiscreteLaplaceDpEvent(noise_parameter={a}, sensitivity={sens}) has no translation"
        )
    return [DiscreteLaplace(epsilon=mul_up(a, sens), sensitivity=int(sens))]


def _check_discrete_laplace_event(
    event: Mapping[str, Any], path: str, depth: int
) -> Mapping[str, Any]:
    """An integer sensitivity in its range, and epsilon = a * sensitivity in epsilon's."""
    where = at("DiscreteLaplaceDpEvent", path)
    a, sens = number(event, "noise_parameter"), number(event, "sensitivity")
    if a is None or sens is None:
        return event
    sign(where, "noise_parameter", a, path, zero=NO_NOISE)
    sign(where, "sensitivity", sens, path)
    if sens < 1 or not sens.is_integer():
        raise DpEventError(f"{where}: sensitivity {sens!r} must be an integer >= 1", path)
    why = outside(SPEC.param("sensitivity"), sens)
    if why is not None:
        raise DpEventError(f"{where}: sensitivity {sens!r} is {why}", path)
    epsilon_in_range(
        where,
        f"noise_parameter {a!r} with sensitivity {sens:g}",
        SPEC.param("epsilon"),
        mul_up(a, sens),
        path,
    )
    return event


SPEC = KindSpec(
    mechanism=DiscreteLaplace,
    description="Discrete Laplace (two-sided geometric) noise on an integer-valued query.",
    neighbours="Your relation, through the integer L1 sensitivity; t = epsilon / sensitivity.",
    pld="discrete_laplace",
    calibration={"epsilon": "max"},
    dp_events={"DiscreteLaplaceDpEvent": _from_discrete_laplace_event},
    dp_event_checks={"DiscreteLaplaceDpEvent": _check_discrete_laplace_event},
    pure_calibration=True,
    title="Discrete Laplace",
    next_query=NextQuery({"sensitivity": 1}, "sensitivity 1"),
    examples=KindSpec.Examples(
        valid=(
            {"epsilon": 1.0, "sensitivity": 3},
            {"epsilon": 1.0, "sensitivity": 2},
            {"epsilon": 0.1, "sensitivity": 1},
        ),
        edges=({"epsilon": 1e-4, "sensitivity": 1}, {"epsilon": 0.05, "sensitivity": 40}),
        calibration={
            "epsilon": ({"sensitivity": 3, "count": 2}, {"sensitivity": 1}, {"sensitivity": 10**6})
        },
    ),
)
