"""Stateless what-if: compose a fixed list of mechanisms and convert (non-adaptive)."""

from __future__ import annotations

import math
from typing import Any

from app.accounting.curve import PrivacyCurve
from app.accounting.filters import FilterKind, spend
from app.accounting.mechanisms import Mechanism
from app.accounting.orders import ORDERS
from app.services.charges import curve_for
from app.services.curves import finite_or_none
from app.services.errors import Unprocessable


def compose(mechanisms: list[Mechanism], delta: float, accounting: str) -> dict[str, Any]:
    """The tightest non-adaptive (epsilon at ``delta``) of the composed mechanisms.

    ``accounting`` = ``rdp``: minimum of the improved RDP conversion on the grid, the zCDP
    conversions, the pure-DP sum and (Gaussian-only) the exact conversion; ``zcdp``: the zCDP
    conversions and, Gaussian-only, the exact one. ``conversions`` lists every candidate.
    """
    total = PrivacyCurve.zero()
    for m in mechanisms:
        total = total + curve_for(m)
    kind = FilterKind.RDP if accounting == "rdp" else FilterKind.ZCDP
    try:
        s = spend(kind, total, delta)
    except ValueError as exc:
        raise Unprocessable(str(exc)) from None
    return {
        "accounting": accounting,
        "delta": delta,
        "epsilon": s.epsilon,
        "method": s.method,
        "order": s.order,
        "rho": finite_or_none(total.rho),
        "pure_epsilon": finite_or_none(total.pure_eps),
        "gaussian_only": total.gaussian_only,
        "orders": [float(a) for a in ORDERS],
        "rdp": [finite_or_none(float(r)) for r in total.rdp],
        "conversions": {k: v for k, v in s.candidates.items() if math.isfinite(v)},
    }


__all__ = ["compose"]
