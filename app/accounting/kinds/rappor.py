"""``rappor``: basic one-time RAPPOR (unary encoding with independent bit flips)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from app.accounting.closed_forms import rappor_rdp
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
class Rappor(Mechanism):
    """Basic one-time RAPPOR: one-hot encode v in [d], keep each bit w.p. e^{eps/2}/(1 + e^{eps/2}).

    Convention (CH24, consistent with EPK14's permanent RR): ``epsilon`` is the total for one
    user's value change v -> v' (two bits differ), so the mechanism is exactly eps-DP. RDP is
    twice the binary-RR curve at eps/2, independent of d [CH24 Thm 1]; rho = eps tanh(eps/4)
    [CH24 Thm 4; HM25].
    """

    kind: ClassVar[str] = "rappor"
    epsilon: float = param(
        help="Total epsilon for one user's value change (two bits, each kept w.p. "
        "e^(eps/2) / (1 + e^(eps/2))).",
        minimum=MIN_EPSILON,
        maximum=MAX_EPSILON,
    )

    @classmethod
    def _raw_curves(cls, units: Sequence[Rappor]) -> UnitCurves:
        eps = np.array([u.epsilon for u in units])
        rho = eps * np.tanh(eps / 4.0) * (1.0 + 2.0**-50)  # tight rho, raised by its rounding
        return UnitCurves.of(rho, rappor_rdp(ORDERS, eps[:, None]), eps)


SPEC = KindSpec(
    mechanism=Rappor,
    description="One-time RAPPOR: a one-hot encoded value with every bit randomized.",
    neighbours="One user's value changes (two bits differ); epsilon is the total.",
    pld="rappor",
    calibration={"epsilon": "max"},
    pure_calibration=True,
    title="RAPPOR",
    next_query=NextQuery({}, "one report"),
    examples=KindSpec.Examples(
        valid=({"epsilon": 2.0}, {"epsilon": 0.1}),
        edges=({"epsilon": 1e-4}, {"epsilon": 10.0}),
        calibration={"epsilon": ({"count": 2}, {})},
    ),
)
