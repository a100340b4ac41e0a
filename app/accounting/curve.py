"""``PrivacyCurve``: what one mechanism invocation (or a whole ledger) costs.

A curve carries every summary the accountant composes:

* ``rho``      zCDP parameter (tight for single mechanisms; ``inf`` if no finite bound),
* ``rdp``      RDP values on the fixed grid ``ORDERS`` (a read-only float64 vector),
* ``pure_eps`` pure-DP epsilon (``inf`` for Gaussians); the sum is itself an (eps, 0) spend,
* ``gaussian_only``  every component is a Gaussian mechanism, so the composition is exactly
  mu-GDP with mu = sqrt(2 rho) and the analytic-Gaussian conversion applies (docs/formulas.md §2.3),
* ``delta``    the entries' own delta (approximate DP / approximate zCDP / approximate RDP):
  each such entry is, for every neighbouring pair, the mixture (1 - delta_i) A + delta_i B with
  A satisfying the entry's rho / RDP / pure-DP values (BS16 section 8, approximate zCDP). The
  composition is then the mixture with weight prod (1 - delta_i) >= 1 - sum delta_i on the
  composed good parts, so ``delta`` is the sum (an upper bound on 1 - prod (1 - delta_i)).

Composition is addition of all four (zCDP: BS16 Lemma 7; RDP: M17 Prop 1; pure DP: basic
composition; deltas: the mixture argument above), repetition is scaling by an integer count.
Both round toward +infinity.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from app.accounting.orders import ORDERS
from app.accounting.rounding import add_up, mul_up

Vector = npt.NDArray[np.float64]


def _frozen(v: Vector) -> Vector:
    out = np.array(v, dtype=np.float64, copy=True)
    out.setflags(write=False)
    return out


@dataclass(frozen=True, eq=False)
class PrivacyCurve:
    """Composable privacy summary of a mechanism or a ledger (see module docstring)."""

    rho: float
    rdp: Vector = field(repr=False)
    pure_eps: float
    gaussian_only: bool
    delta: float = 0.0

    def __post_init__(self) -> None:
        rdp = np.asarray(self.rdp, dtype=np.float64)
        if rdp.shape != ORDERS.shape:
            raise ValueError(f"rdp must have {ORDERS.size} values (one per order), got {rdp.shape}")
        if np.isnan(rdp).any() or (rdp < 0).any():
            raise ValueError("rdp values must be non-negative and not NaN")
        if math.isnan(self.rho) or self.rho < 0:
            raise ValueError(f"rho must be non-negative, got {self.rho!r}")
        if math.isnan(self.pure_eps) or self.pure_eps < 0:
            raise ValueError(f"pure_eps must be non-negative, got {self.pure_eps!r}")
        if not 0.0 <= self.delta <= 1.0:
            raise ValueError(f"delta must be in [0, 1], got {self.delta!r}")
        object.__setattr__(self, "rdp", _frozen(rdp))

    @classmethod
    def zero(cls) -> PrivacyCurve:
        """The empty composition (an empty ledger is vacuously Gaussian-only: mu = 0)."""
        return cls(rho=0.0, rdp=np.zeros_like(ORDERS), pure_eps=0.0, gaussian_only=True)

    def __add__(self, other: PrivacyCurve) -> PrivacyCurve:
        return PrivacyCurve(
            rho=add_up(self.rho, other.rho),
            rdp=add_up(self.rdp, other.rdp),
            pure_eps=add_up(self.pure_eps, other.pure_eps),
            gaussian_only=self.gaussian_only and other.gaussian_only,
            delta=min(1.0, add_up(self.delta, other.delta)),
        )

    def scaled(self, count: int) -> PrivacyCurve:
        """The curve of ``count`` repetitions (``count`` >= 1)."""
        if count < 1:
            raise ValueError(f"count must be >= 1, got {count!r}")
        if count == 1:
            return self
        return PrivacyCurve(
            rho=mul_up(self.rho, float(count)),
            rdp=mul_up(self.rdp, float(count)),
            pure_eps=mul_up(self.pure_eps, float(count)),
            gaussian_only=self.gaussian_only,
            delta=min(1.0, mul_up(self.delta, float(count))),
        )

    def reorder_bound(self, additions: int) -> PrivacyCurve:
        """An upper bound on this sum added up in any other order, when it has ``additions``
        more terms than a fixed base (a ledger whose active holds may be committed in any order
        after a charge was admitted with them): each ``__add__`` rounds up by at most one part
        in 2^52, so any order of ``additions`` additions is at most the exact sum times
        (1 + 2^-52)^additions <= 1 + (additions + 1) 2^-52 (for additions < 2^26), and this sum
        is at least the exact one. The identity for ``additions`` <= 0."""
        if additions <= 0:
            return self
        # beyond 2^26 additions (far beyond any count of holds), a looser factor, still a bound
        factor = 1.0 + (additions + 1) * 2.0**-52 if additions <= 2**26 else 1.0 + 2.0**-20
        return PrivacyCurve(
            rho=mul_up(self.rho, factor),
            rdp=mul_up(self.rdp, factor),
            pure_eps=mul_up(self.pure_eps, factor),
            gaussian_only=self.gaussian_only,
            delta=min(1.0, mul_up(self.delta, factor)),
        )

    def is_finite(self) -> bool:
        """Whether the RDP curve and rho are finite (pure_eps may be infinite)."""
        return bool(np.isfinite(self.rdp).all()) and math.isfinite(self.rho)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PrivacyCurve):
            return NotImplemented
        return (
            self.rho == other.rho
            and self.pure_eps == other.pure_eps
            and self.gaussian_only == other.gaussian_only
            and self.delta == other.delta
            and bool(np.array_equal(self.rdp, other.rdp))
        )

    __hash__ = None  # type: ignore[assignment]


def compose(curves: list[PrivacyCurve] | tuple[PrivacyCurve, ...]) -> PrivacyCurve:
    """Sum of curves (an empty list composes to ``PrivacyCurve.zero()``)."""
    total = PrivacyCurve.zero()
    for c in curves:
        total = total + c
    return total


__all__ = ["PrivacyCurve", "Vector", "compose"]
