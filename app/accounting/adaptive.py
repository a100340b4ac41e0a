"""A privacy filter for fully adaptive RDP accounting that wastes little of the budget.

Setting: a pipeline may choose each mechanism and its parameters after seeing earlier outputs
(fully adaptive composition); the dataset admits a charge only if the filter stays satisfied
afterwards [Rogers, Roth, Ullman, Vadhan 2016]. Ordinary composition theorems do not cover
this; the filter below is valid for it.

**The filter.** Fixed when the dataset is created: orders alpha_1 .. alpha_k (on the grid
``ORDERS``), weights w_j > 0 with sum 1, and thresholds

    T_j = eps_B - log1p(-1/alpha_j) + (log(w_j delta_B) + log alpha_j) / (alpha_j - 1),

the improved RDP -> DP conversion [CKS20 Prop 12; BBGHS20 Thm 21; docs/formulas.md §2.2(b)] solved
for the RDP value, at delta_B w_j. A charge is admitted iff afterwards S(alpha_j) <= T_j for
some j (S: the composed RDP of the admitted charges), or the pure-DP sum is <= eps_B.

**Theorem.** The whole interaction is (eps_B, delta_B)-DP.

*Proof.* Let L be the privacy loss of the transcript (outputs, and the parameters chosen from
them) for a neighbouring pair, under P. For each alpha, M_alpha = exp((alpha - 1)(L_t - S_t(alpha)))
is a non-negative supermartingale, since each step's RDP bound holds given the past, so
E_P[exp((alpha - 1)(L - S(alpha)))] <= 1 at the end [Feldman, Zrnic 2021, arXiv 2008.11193,
the Renyi filter: with k = 1 this is their (alpha, T)-RDP guarantee, and the improved
conversion applies to it]. For every l and alpha > 1,
(1 - e^{eps - l})_+ <= K_alpha e^{(alpha - 1)(l - eps)} with
K_alpha = (1/alpha)(1 - 1/alpha)^{alpha - 1} (maximise over l: the kernel of the improved
conversion). At the end some alpha* has
S(alpha*) <= T_{alpha*}, so e^{(alpha* - 1)(T - S)} >= 1 there, and

    (1 - e^{eps - L})_+ <= sum_j K_j e^{(alpha_j - 1)(L - eps)} e^{(alpha_j - 1)(T_j - S(alpha_j))}.

Taking E_P: delta(eps_B) <= sum_j K_j e^{(alpha_j - 1)(T_j - eps_B)} = sum_j w_j delta_B = delta_B,
by the choice of T_j. On paths admitted by the pure-DP sum instead, L <= eps_B surely and the
left side is 0. [Derived here from the cited results; with k = 1 it is Feldman-Zrnic plus the
improved conversion. docs/formulas.md §2.6 states the k > 1 case only in the classic tail form
(Ville's inequality at delta / k per order); this weighted kernel form is never worse.]

**The order.** ``choose_filter`` takes one order (k = 1, w = 1): the union over k orders
costs log(1/w_j) / (alpha_j - 1) at each, more than the orders gain on the workloads measured
in ``bench/filters.py`` (docs/accounting.md, "Choosing an accounting"). The order maximises
the Gaussian capacity T_alpha / alpha (the largest total rho a Gaussian ledger may reach),
except that when the
dataset may hold subsampled-Gaussian or generic RDP entries, whose curves rise steeply with
the order, it takes the smallest order within ``STEEP_CURVE_SLACK`` (2 %) of that capacity.
Everything depends on the budget and the allowed kinds only, never on the ledger.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from app.accounting import conversions as conv
from app.accounting.kinds import KINDS
from app.accounting.orders import ORDERS
from app.accounting.rounding import up

Vector = npt.NDArray[np.float64]

FILTER_NAME = "rdp_fixed_orders"
"""The name under which a dataset records this filter."""

FORMAT_VERSION = 1

_U8 = 8.0 * 2.0**-53
"""Rounding bound per unit of the terms' magnitudes in the spend readings (8 unit roundoffs)."""

STEEP_CURVE_SLACK = 0.02
"""Gaussian capacity given up, at most, for a lower order when steep RDP curves may appear."""

STEEP_CURVE_KINDS = frozenset(name for name, s in KINDS.items() if s.steep_curve)
"""Kinds whose RDP curve grows much faster than linearly in the order (``KindSpec.steep_curve``)."""


def thresholds(
    epsilon: float, delta: float, orders: Vector, weights: Vector | None = None
) -> Vector:
    """T(alpha) = eps - log1p(-1/alpha) + (log(w delta) + log alpha) / (alpha - 1) per order
    (see the module docstring), rounded down by a few ulps. ``weights`` default to 1."""
    eps, dlt = conv.check_epsilon(epsilon), conv.check_delta(delta)
    a = np.asarray(orders, dtype=np.float64)
    if (a <= 1.0).any():
        raise ValueError("orders must all be > 1")
    w = np.ones_like(a) if weights is None else np.asarray(weights, dtype=np.float64)
    t = eps - np.log1p(-1.0 / a) + (math.log(dlt) + np.log(w) + np.log(a)) / (a - 1.0)
    # a relative 2^-50 below the evaluated value covers the few-ulp error of the expression
    return t - np.abs(t) * 2.0**-50 - 2.0**-1070


def gaussian_capacity(epsilon: float, delta: float, orders: Vector = ORDERS) -> Vector:
    """T(alpha) / alpha: the largest total rho a Gaussian ledger (RDP alpha rho) may reach under
    a one-order filter at alpha."""
    a = np.asarray(orders, dtype=np.float64)
    return thresholds(epsilon, delta, a) / a


@dataclass(frozen=True)
class RenyiFilter:
    """The admission rule of the module docstring, as stored with a dataset."""

    epsilon: float
    delta: float
    orders: tuple[float, ...]
    weights: tuple[float, ...]
    thresholds: tuple[float, ...]

    def __post_init__(self) -> None:
        conv.check_epsilon(self.epsilon)
        conv.check_delta(self.delta)
        if not self.orders or not (len(self.orders) == len(self.weights) == len(self.thresholds)):
            raise ValueError("orders, weights and thresholds must be non-empty and of one length")
        if any(not (math.isfinite(a) and a > 1.0) for a in self.orders):
            raise ValueError(f"orders must be finite and > 1, got {self.orders!r}")
        if any(not (math.isfinite(w) and w > 0.0) for w in self.weights):
            raise ValueError(f"weights must be > 0, got {self.weights!r}")
        if math.fsum(self.weights) > 1.0 + 1e-12:
            raise ValueError(f"weights must sum to at most 1, got {self.weights!r}")
        expected = thresholds(
            self.epsilon, self.delta, np.array(self.orders), np.array(self.weights)
        )
        if any(t > e for t, e in zip(self.thresholds, expected.tolist(), strict=True)):
            raise ValueError("thresholds exceed what the budget allows at these orders")

    @classmethod
    def create(
        cls,
        epsilon: float,
        delta: float,
        orders: Sequence[float],
        weights: Sequence[float] | None = None,
    ) -> RenyiFilter:
        """The filter for a budget at the given orders (weights default to equal shares)."""
        a = np.array([float(x) for x in orders], dtype=np.float64)
        w = (
            np.full(a.size, 1.0 / a.size)
            if weights is None
            else np.array([float(x) for x in weights])
        )
        t = thresholds(epsilon, delta, a, w)
        return cls(
            float(epsilon),
            float(delta),
            tuple(a.tolist()),
            tuple(w.tolist()),
            tuple(t.tolist()),
        )

    def _indices(self, grid: Vector) -> npt.NDArray[np.intp]:
        idx = np.searchsorted(grid, np.array(self.orders))
        idx = np.minimum(idx, grid.size - 1)
        if not np.array_equal(grid[idx], np.array(self.orders)):
            raise ValueError(f"the filter's orders {self.orders} are not all on the grid")
        return idx

    def admits(self, rdp: Vector, pure_eps: float, grid: Vector = ORDERS) -> bool:
        """Whether a ledger whose composed RDP on ``grid`` is ``rdp`` (new charge included) and
        whose pure-DP sum is ``pure_eps`` satisfies the filter."""
        if pure_eps <= self.epsilon:
            return True
        values = np.asarray(rdp, dtype=np.float64)[self._indices(grid)]
        return bool((values <= np.array(self.thresholds)).any())

    def epsilon_spent(
        self, rdp: Vector, pure_eps: float, delta: float | None = None, grid: Vector = ORDERS
    ) -> tuple[float, float | None]:
        """(epsilon, order): the least epsilon at ``delta`` (default: the budget's) for which the
        same orders and weights would still admit this ledger: an odometer reading, whose
        guarantee under adaptivity is the filter's budget (docs/formulas.md §2.6). Order None: the
        pure-DP sum."""
        dlt = self.delta if delta is None else conv.check_delta(delta)
        a = np.array(self.orders)
        s = np.asarray(rdp, dtype=np.float64)[self._indices(grid)]
        w = np.array(self.weights)
        l1 = np.log1p(-1.0 / a)
        tail = (math.log(dlt) + np.log(w) + np.log(a)) / (a - 1.0)
        # raised by a bound on its rounding, a few ulps of the magnitudes of its terms (as
        # ``conversions.rdp_epsilon_improved``): 4 ulps of the result fell short of it
        err = _U8 * (
            s + np.abs(l1) + (abs(math.log(dlt)) - np.log(w) + np.log(a)) / (a - 1.0) + 1.0
        )
        eps = s + l1 - tail + err
        j = int(np.argmin(eps))
        best = max(0.0, up(float(eps[j]), 4))
        if pure_eps <= best:
            return float(pure_eps), None
        return best, float(a[j])

    def delta_spent(
        self, rdp: Vector, pure_eps: float, epsilon: float, grid: Vector = ORDERS
    ) -> float:
        """The least delta at ``epsilon`` for which these orders and weights would admit the
        ledger (odometer reading; 0 if the pure-DP sum is within ``epsilon``)."""
        eps = conv.check_epsilon(epsilon)
        if pure_eps <= eps:
            return 0.0
        a = np.array(self.orders)
        s = np.asarray(rdp, dtype=np.float64)[self._indices(grid)]
        w = np.array(self.weights)
        with np.errstate(over="ignore", invalid="ignore"):
            l1 = np.log1p(-1.0 / a)
            log_d = (a - 1.0) * (s - eps + l1) - np.log(a) - np.log(w)
            # its rounding: s - eps cancels, and (a - 1) multiplies the error of the terms (as
            # ``conversions.rdp_delta_improved``); 4 ulps of delta fell short of it
            log_d = log_d + _U8 * ((a - 1.0) * (s + eps + np.abs(l1)) + np.log(a) - np.log(w) + 1.0)
        log_d = np.where(np.isnan(log_d), np.inf, log_d)
        return min(1.0, up(math.exp(min(float(log_d.min()), 0.0)), 4))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form to store with the dataset."""
        return {
            "filter": FILTER_NAME,
            "version": FORMAT_VERSION,
            "epsilon": self.epsilon,
            "delta": self.delta,
            "orders": list(self.orders),
            "weights": list(self.weights),
            "thresholds": list(self.thresholds),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RenyiFilter:
        """Inverse of ``to_dict`` (validated: thresholds must not exceed the budget's)."""
        if data.get("filter") != FILTER_NAME or data.get("version") != FORMAT_VERSION:
            raise ValueError(f"not a stored {FILTER_NAME} filter (version {FORMAT_VERSION})")
        return cls(
            float(data["epsilon"]),
            float(data["delta"]),
            tuple(float(x) for x in data["orders"]),
            tuple(float(x) for x in data["weights"]),
            tuple(float(x) for x in data["thresholds"]),
        )


def choose_order(
    epsilon: float,
    delta: float,
    allowed_mechanisms: Iterable[str] | None = None,
    grid: Vector = ORDERS,
) -> float:
    """The one order of the module docstring, from the budget and allowed kinds only."""
    cap = gaussian_capacity(epsilon, delta, grid)
    steep = allowed_mechanisms is None or bool(STEEP_CURVE_KINDS & set(allowed_mechanisms))
    best = float(cap.max())
    if not steep or best <= 0.0:
        return float(grid[int(np.argmax(cap))])
    j = int(np.flatnonzero(cap >= (1.0 - STEEP_CURVE_SLACK) * best)[0])
    return float(grid[j])


def choose_filter(
    epsilon: float,
    delta: float,
    allowed_mechanisms: Iterable[str] | None = None,
    grid: Vector = ORDERS,
) -> RenyiFilter:
    """The recommended adaptive RDP filter for a new dataset with budget (epsilon, delta)."""
    return RenyiFilter.create(
        epsilon, delta, [choose_order(epsilon, delta, allowed_mechanisms, grid)], [1.0]
    )


__all__ = [
    "FILTER_NAME",
    "STEEP_CURVE_KINDS",
    "STEEP_CURVE_SLACK",
    "RenyiFilter",
    "choose_filter",
    "choose_order",
    "gaussian_capacity",
    "thresholds",
]
