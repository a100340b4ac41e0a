"""``RunningSum``: a sum of privacy curves that also supports removing a term, soundly.

Active reservations hold budget: their curves are summed into the dataset's totals row so that
admission costs O(1) however many holds exist, and a hold that is committed, released or expired
is removed from the sum again. Removal must never leave the sum below the true sum of the
terms still present:

* finite parts are added with ``add_up`` and removed with ``sub_up`` (both round toward
  +infinity). If the stored sum ``s`` is >= the exact sum of its terms and ``b`` is one of them
  (the same float values that were added), ``sub_up(s, b)`` >= s - b >= the exact sum of the
  rest. Rounding only ever errs upward, by at most one ulp per operation;
* infinite parts (the pure-DP epsilon of a Gaussian, an RDP value above an entry's largest
  order) are counted instead of summed, so removing them is exact (inf - inf is undefined);
* "every term is Gaussian" is kept as a count of non-Gaussian terms; entries' own deltas are
  summed like the other finite parts;
* when the last term leaves, the sum is reset to exact zero, so drift never accumulates across
  quiet periods.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from app.accounting.curve import PrivacyCurve, Vector
from app.accounting.orders import ORDERS
from app.accounting.rounding import add_up, sub_up

Counts = npt.NDArray[np.int64]


def _finite(x: float) -> float:
    return x if math.isfinite(x) else 0.0


@dataclass(frozen=True, eq=False)
class RunningSum:
    """Sum of ``count`` curves: finite parts rounded up, infinite parts counted."""

    count: int = 0
    rho: float = 0.0
    rho_inf: int = 0
    rdp: Vector = field(default_factory=lambda: np.zeros_like(ORDERS), repr=False)
    rdp_inf: Counts = field(
        default_factory=lambda: np.zeros(ORDERS.shape, dtype=np.int64), repr=False
    )
    pure_eps: float = 0.0
    pure_inf: int = 0
    non_gaussian: int = 0
    delta: float = 0.0

    def add(self, curve: PrivacyCurve) -> RunningSum:
        """The sum with ``curve`` added."""
        inf = np.isinf(curve.rdp)
        return RunningSum(
            count=self.count + 1,
            rho=add_up(self.rho, _finite(curve.rho)),
            rho_inf=self.rho_inf + (not math.isfinite(curve.rho)),
            rdp=add_up(self.rdp, np.where(inf, 0.0, curve.rdp)),
            rdp_inf=self.rdp_inf + inf,
            pure_eps=add_up(self.pure_eps, _finite(curve.pure_eps)),
            pure_inf=self.pure_inf + (not math.isfinite(curve.pure_eps)),
            non_gaussian=self.non_gaussian + (not curve.gaussian_only),
            delta=add_up(self.delta, curve.delta),
        )

    def remove(self, curve: PrivacyCurve) -> RunningSum:
        """The sum without ``curve``, which must be a term that was added (same values)."""
        if self.count < 1:
            raise ValueError("cannot remove a curve from an empty sum")
        if self.count == 1:
            return RunningSum()
        inf = np.isinf(curve.rdp)
        return RunningSum(
            count=self.count - 1,
            rho=max(0.0, sub_up(self.rho, _finite(curve.rho))),
            rho_inf=self.rho_inf - (not math.isfinite(curve.rho)),
            rdp=np.maximum(0.0, sub_up(self.rdp, np.where(inf, 0.0, curve.rdp))),
            rdp_inf=self.rdp_inf - inf,
            pure_eps=max(0.0, sub_up(self.pure_eps, _finite(curve.pure_eps))),
            pure_inf=self.pure_inf - (not math.isfinite(curve.pure_eps)),
            non_gaussian=self.non_gaussian - (not curve.gaussian_only),
            delta=max(0.0, sub_up(self.delta, curve.delta)),
        )

    def total(self) -> PrivacyCurve | None:
        """The summed curve (infinite where any term is), or None for an empty sum."""
        if self.count == 0:
            return None
        return PrivacyCurve(
            rho=math.inf if self.rho_inf else self.rho,
            rdp=np.where(self.rdp_inf > 0, np.inf, self.rdp),
            pure_eps=math.inf if self.pure_inf else self.pure_eps,
            gaussian_only=self.non_gaussian == 0,
            delta=min(1.0, self.delta),
        )


__all__ = ["RunningSum"]
