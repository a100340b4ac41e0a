"""``laplace``: the Laplace mechanism f(x) + Lap(b)^d (epsilon = Delta / b, or b with Delta)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from app.accounting.closed_forms import laplace_rdp, laplace_rho_array
from app.accounting.kinds._events import NO_NOISE, at, epsilon_in_range, number, sign
from app.accounting.kinds._spec import (
    MAX_EPSILON,
    MAX_SCALE,
    MIN_EPSILON,
    MIN_SCALE,
    KindSpec,
    Mechanism,
    NextQuery,
    Param,
    Translate,
    UnitCurves,
    column,
    event_number,
    param,
)
from app.accounting.orders import ORDERS
from app.accounting.rounding import div_up

SCALE = Param(
    name="scale",
    type="float",
    help="Scale b of the Laplace noise (instead of epsilon; with sensitivity).",
    unit="units of the query",
    minimum=MIN_SCALE,
    maximum=MAX_SCALE,
    required=False,
    default=None,
    cli_help="Scale b of the Laplace noise (instead of epsilon; with sensitivity).",
)
SENSITIVITY = Param(
    name="sensitivity",
    type="float",
    help="L1 sensitivity of the query (with scale).",
    unit="units of the query",
    minimum=MIN_SCALE,
    maximum=MAX_SCALE,
    required=False,
    default=None,
    cli_help="L1 sensitivity of the query (with scale; default 1).",
)


@dataclass(frozen=True, slots=True)
class Laplace(Mechanism):
    """Laplace mechanism f(x) + Lap(b)^d with epsilon = Delta / b (exactly epsilon-DP).

    Convention: ``epsilon`` = L1 sensitivity / scale, under the caller's neighbouring relation.
    RDP: Mironov's exact curve [M17 Prop 6]; tight zCDP rho = eps + e^{-eps} - 1 [HM25], not
    eps^2 / 2. The scalar formula is the worst case for product noise (docs/formulas.md §1.2).
    """

    kind: ClassVar[str] = "laplace"
    epsilon: float = param(
        help="Sensitivity / scale: the mechanism is exactly epsilon-DP.",
        minimum=MIN_EPSILON,
        maximum=MAX_EPSILON,
    )

    @classmethod
    def from_scale(cls, scale: float, sensitivity: float = 1.0, count: int = 1) -> Laplace:
        """Laplace noise of scale ``scale`` on a query of L1 sensitivity ``sensitivity``."""
        b = SCALE.check(scale)
        d = SENSITIVITY.check(sensitivity)
        return cls(epsilon=d / b, count=count)

    @classmethod
    def from_fields(cls, fields: dict[str, Any]) -> Mechanism:
        """``epsilon``, or ``scale`` (+ ``sensitivity``, default 1)."""
        if "scale" in fields:
            if "epsilon" in fields:
                raise ValueError("laplace takes either epsilon or scale (+ sensitivity), not both")
            params = dict(fields)
            scale = params.pop("scale")
            sensitivity = params.pop("sensitivity", 1.0)
            count = params.pop("count", 1)
            if params:
                raise ValueError(f"laplace: unexpected fields {sorted(params)}")
            return cls.from_scale(scale, sensitivity, count=count)
        if "sensitivity" in fields:
            raise ValueError("laplace: give epsilon (= sensitivity / scale) or scale + sensitivity")
        # (super() names the class: a slotted dataclass is a new class, so the implicit form
        # would refer to the one the decorator replaced)
        return super(Laplace, cls).from_fields(fields)  # noqa: UP008

    @classmethod
    def _raw_curves(cls, units: Sequence[Laplace]) -> UnitCurves:
        eps = column(units, "epsilon")
        return UnitCurves.of(laplace_rho_array(eps), laplace_rdp(ORDERS, eps[:, None]), eps)


def _from_laplace_event(event: Mapping[str, Any], translate: Translate) -> list[Mechanism]:
    """``LaplaceDpEvent(noise_multiplier)``: scale / sensitivity, so epsilon = 1 / it (rounded
    up: a float quotient may be half an ulp below it)."""
    nm = event_number(event, "noise_multiplier")
    if nm <= 0:
        raise ValueError("LaplaceDpEvent with noise_multiplier 0 is not differentially private")
    return [Laplace(epsilon=div_up(1.0, nm))]


def _check_laplace_event(event: Mapping[str, Any], path: str, depth: int) -> Mapping[str, Any]:
    """1 / its noise multiplier in epsilon's range."""
    where = at("LaplaceDpEvent", path)
    nm = number(event, "noise_multiplier")
    if nm is None:
        return event
    sign(where, "noise_multiplier", nm, path, zero=NO_NOISE)
    epsilon_in_range(
        where, f"noise_multiplier {nm!r}", SPEC.param("epsilon"), div_up(1.0, nm), path
    )
    return event


SPEC = KindSpec(
    mechanism=Laplace,
    description="Laplace noise added to a query of bounded L1 sensitivity (epsilon-DP).",
    neighbours="Your relation, through the L1 sensitivity; epsilon = sensitivity / scale.",
    pld="laplace_fields",
    calibration={"epsilon": "max", "scale": "min"},
    dp_events={"LaplaceDpEvent": _from_laplace_event},
    dp_event_checks={"LaplaceDpEvent": _check_laplace_event},
    one_of=(("epsilon",), ("scale", "sensitivity")),
    extra_params=(SCALE, SENSITIVITY),
    pure_calibration=True,
    title="Laplace",
    next_query=NextQuery({}, "any sensitivity (scale = sensitivity / ε)"),
    examples=KindSpec.Examples(
        valid=(
            {"epsilon": 0.3},
            {"epsilon": 0.5},
            {"scale": 2.0, "sensitivity": 1.0},
            {"scale": 40.0, "sensitivity": 2.0},
        ),
        edges=({"epsilon": 100.0, "count": 1000}, {"epsilon": 1e-9}),
        calibration={
            "epsilon": ({},),
            "scale": (
                {"sensitivity": 2.0, "count": 2},
                {"sensitivity": 1.0},
                {"sensitivity": 1e-6},
                {"sensitivity": 1e12},
            ),
        },
    ),
)
