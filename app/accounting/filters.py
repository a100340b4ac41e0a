"""Admission rules (privacy filters) and the spend each one guarantees (DESIGN.md, FORMULAS.md 2.6).

A dataset fixes its filter when it is created:

* ``gdp``             mechanisms restricted to ``gaussian``: sum mu_i^2 <= mu_B^2 with the
                      exact analytic-Gaussian conversion; valid under full adaptivity
                      [Smith, Thakurta 2022].
* ``zcdp_filter``     accounting ``zcdp``, adaptive: sum rho_i <= rho_B, rho_B from the
                      tightest zCDP conversion; a Renyi filter at every order at once
                      [Feldman, Zrnic 2021].
* ``zcdp``            accounting ``zcdp``, not adaptive: the same admission rule; the spend may also
                      use the exact Gaussian conversion when every entry is Gaussian.
* ``rdp``             accounting ``rdp``, not adaptive (dp_accounting's and Opacus' assumption):
                      admit iff the tightest conversion of the composed curve is within budget.
* ``rdp_union_bound`` accounting ``rdp``, adaptive: a Renyi filter at each grid order, paying a
                      union bound for choosing the order afterwards: admit iff for some order
                      S(alpha) <= eps_B - log(|grid| / delta_B) / (alpha - 1), or the pure-DP sum
                      is within eps_B (its loss bound holds surely, so it costs no delta).

``spend`` returns the epsilon at a delta that the dataset's filter guarantees, names the method
and lists every candidate it took the minimum of.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np

from app.accounting import conversions as conv
from app.accounting.curve import PrivacyCurve
from app.accounting.orders import ORDERS
from app.accounting.rounding import up


class FilterKind(StrEnum):
    """The admission rule of a dataset (see module docstring)."""

    GDP = "gdp"
    ZCDP_FILTER = "zcdp_filter"
    ZCDP = "zcdp"
    RDP = "rdp"
    RDP_UNION_BOUND = "rdp_union_bound"


MAX_BUDGET_EPSILON = 1e6
"""Largest budget epsilon accepted (far beyond any meaningful guarantee; keeps numbers finite)."""

MIN_BUDGET_DELTA = 2.0**-1022
"""Smallest budget delta accepted: the smallest normal float (``sys.float_info.min``). Below
2**-1024, ``1 / delta`` overflows and the Bun-Steinke, classic RDP and exact Gaussian conversions
become infinite (every Gaussian charge would fail); between the two, delta is subnormal, has
fewer than 53 significant bits, and the ulp margins by which conversions round up stop being
relative. Every filter kind and mechanism is checked at this value (tests/unit/test_min_delta.py).
"""

RHO_FILTERS = frozenset({FilterKind.GDP, FilterKind.ZCDP_FILTER, FilterKind.ZCDP})


def filter_kind(
    accounting: str, adaptive: bool, allowed_mechanisms: Sequence[str] | None
) -> FilterKind:
    """The filter a dataset gets from its settings at creation."""
    if accounting not in ("rdp", "zcdp"):
        raise ValueError(f"accounting must be 'rdp' or 'zcdp', got {accounting!r}")
    if allowed_mechanisms is not None and set(allowed_mechanisms) == {"gaussian"}:
        return FilterKind.GDP
    if accounting == "zcdp":
        return FilterKind.ZCDP_FILTER if adaptive else FilterKind.ZCDP
    return FilterKind.RDP_UNION_BOUND if adaptive else FilterKind.RDP


@dataclass(frozen=True)
class Budget:
    """A privacy budget (epsilon, delta), validated: epsilon > 0 finite, delta in (0, 1)."""

    epsilon: float
    delta: float

    def __post_init__(self) -> None:
        eps = conv.check_epsilon(self.epsilon)
        if not 0 < eps <= MAX_BUDGET_EPSILON:
            raise ValueError(
                f"budget epsilon must be in (0, {MAX_BUDGET_EPSILON:g}], got {self.epsilon!r}"
            )
        object.__setattr__(self, "epsilon", eps)
        delta = conv.check_delta(self.delta)
        if delta < MIN_BUDGET_DELTA:
            raise ValueError(
                f"budget delta must be >= {MIN_BUDGET_DELTA!r} (the smallest delta whose "
                f"conversions stay finite and sound), got {self.delta!r}"
            )
        object.__setattr__(self, "delta", delta)


@dataclass(frozen=True)
class Spend:
    """epsilon at ``delta`` (or delta at ``epsilon``) by ``method``, minimum of ``candidates``."""

    epsilon: float
    delta: float
    method: str
    order: float | None = None
    candidates: dict[str, float] = field(default_factory=dict)


def _pick(
    candidates: dict[str, float], orders: dict[str, float]
) -> tuple[str, float, float | None]:
    method = min(candidates, key=lambda k: (candidates[k], k))
    return method, candidates[method], orders.get(method)


def _mu(curve: PrivacyCurve) -> float:
    return math.sqrt(2.0 * curve.rho)


def union_bound_epsilon(rdp: np.ndarray, delta: float) -> tuple[float, float]:
    """Classic conversion at delta / |grid|: the adaptive RDP filter's guarantee,
    min_j r_j + (log |grid| - log delta) / (alpha_j - 1), in log space (delta / |grid| would
    underflow for delta near the smallest float)."""
    delta = conv.check_delta(delta)
    r = np.asarray(rdp, dtype=np.float64)
    eps = r + (math.log(ORDERS.size) - math.log(delta)) / (ORDERS - 1.0)
    j = int(np.argmin(eps))
    return max(0.0, up(float(eps[j]), 4)), float(ORDERS[j])


def spend(kind: FilterKind, curve: PrivacyCurve, delta: float) -> Spend:
    """The epsilon at ``delta`` that filter ``kind`` guarantees for composed ``curve``."""
    delta = conv.check_delta(delta)
    cands: dict[str, float] = {}
    orders: dict[str, float] = {}
    if kind is FilterKind.GDP:
        if not curve.gaussian_only:
            raise ValueError("the Gaussian-DP filter applies to Gaussian-only ledgers")
        cands["gaussian_exact"] = conv.gaussian_epsilon(_mu(curve), delta)
    elif kind in (FilterKind.ZCDP, FilterKind.ZCDP_FILTER):
        cands["zcdp_bun_steinke"] = conv.zcdp_epsilon_bun_steinke(curve.rho, delta)
        cands["zcdp_cks"] = conv.zcdp_epsilon_cks(curve.rho, delta)
        if kind is FilterKind.ZCDP and curve.gaussian_only:
            cands["gaussian_exact"] = conv.gaussian_epsilon(_mu(curve), delta)
    elif kind is FilterKind.RDP:
        cands["rdp_improved"], orders["rdp_improved"] = conv.rdp_epsilon_improved(curve.rdp, delta)
        cands["rdp_classic"], orders["rdp_classic"] = conv.rdp_epsilon_classic(curve.rdp, delta)
        cands["zcdp_bun_steinke"] = conv.zcdp_epsilon_bun_steinke(curve.rho, delta)
        cands["zcdp_cks"] = conv.zcdp_epsilon_cks(curve.rho, delta)
        cands["pure_dp"] = curve.pure_eps
        if curve.gaussian_only:
            cands["gaussian_exact"] = conv.gaussian_epsilon(_mu(curve), delta)
    elif kind is FilterKind.RDP_UNION_BOUND:
        ub_eps, ub_order = union_bound_epsilon(curve.rdp, delta)
        cands["rdp_union_bound"], orders["rdp_union_bound"] = ub_eps, ub_order
        cands["pure_dp"] = curve.pure_eps
    else:  # pragma: no cover - exhaustive
        raise ValueError(f"unknown filter {kind!r}")
    method, best, order = _pick(cands, orders)
    return Spend(epsilon=best, delta=delta, method=method, order=order, candidates=cands)


def spend_delta(kind: FilterKind, curve: PrivacyCurve, epsilon: float) -> Spend:
    """The delta at ``epsilon`` that filter ``kind`` guarantees for composed ``curve``."""
    epsilon = conv.check_epsilon(epsilon)
    cands: dict[str, float] = {}
    orders: dict[str, float] = {}
    pure = 0.0 if epsilon >= curve.pure_eps else 1.0
    if kind is FilterKind.GDP:
        if not curve.gaussian_only:
            raise ValueError("the Gaussian-DP filter applies to Gaussian-only ledgers")
        cands["gaussian_exact"] = conv.gaussian_delta(_mu(curve), epsilon)
    elif kind in (FilterKind.ZCDP, FilterKind.ZCDP_FILTER):
        cands["zcdp_bun_steinke"] = conv.zcdp_delta_bun_steinke(curve.rho, epsilon)
        cands["zcdp_cks"] = conv.zcdp_delta_cks(curve.rho, epsilon)
        if kind is FilterKind.ZCDP and curve.gaussian_only:
            cands["gaussian_exact"] = conv.gaussian_delta(_mu(curve), epsilon)
    elif kind is FilterKind.RDP:
        cands["rdp_improved"], orders["rdp_improved"] = conv.rdp_delta_improved(curve.rdp, epsilon)
        cands["rdp_classic"], orders["rdp_classic"] = conv.rdp_delta_classic(curve.rdp, epsilon)
        cands["zcdp_bun_steinke"] = conv.zcdp_delta_bun_steinke(curve.rho, epsilon)
        cands["zcdp_cks"] = conv.zcdp_delta_cks(curve.rho, epsilon)
        cands["pure_dp"] = pure
        if curve.gaussian_only:
            cands["gaussian_exact"] = conv.gaussian_delta(_mu(curve), epsilon)
    elif kind is FilterKind.RDP_UNION_BOUND:
        ub_delta, ub_order = conv.rdp_delta_classic(curve.rdp, epsilon)
        cands["rdp_union_bound"] = min(1.0, up(ub_delta * ORDERS.size, 2))
        orders["rdp_union_bound"] = ub_order
        cands["pure_dp"] = pure
    else:  # pragma: no cover - exhaustive
        raise ValueError(f"unknown filter {kind!r}")
    method, best, order = _pick(cands, orders)
    return Spend(epsilon=epsilon, delta=best, method=method, order=order, candidates=cands)


def filter_bound(kind: FilterKind, budget: Budget) -> float | None:
    """For rho-based filters, the largest admissible total rho; None for RDP filters.

    gdp: mu_B^2 / 2 with mu_B the largest mu whose exact delta(eps_B) <= delta_B;
    zcdp: the largest rho whose tightest zCDP conversion is within budget.
    """
    if kind is FilterKind.GDP:
        mu = conv.gaussian_mu_for_budget(budget.epsilon, budget.delta)
        bound = mu * mu / 2.0
        # round down: the bound must not exceed what the budget allows
        while (
            bound > 0 and conv.gaussian_delta(math.sqrt(2.0 * bound), budget.epsilon) > budget.delta
        ):
            bound = float(np.nextafter(bound, 0.0))
        return bound
    if kind in (FilterKind.ZCDP, FilterKind.ZCDP_FILTER):
        return conv.zcdp_rho_for_budget(budget.epsilon, budget.delta)
    return None


def filter_spend(
    kind: FilterKind, curve: PrivacyCurve, budget: Budget, bound: float | None
) -> Spend:
    """``spend`` at the budget's delta, consistent with admission.

    For the rho filters (gdp, zcdp) the admission rule is ``rho <= bound``, and the bound was
    verified to give (eps_B, delta_B) when it was computed. While the ledger is within that
    bound the filter itself certifies eps_B, so the reported epsilon is capped at eps_B: two
    numerical routes (root finding for epsilon, bisection for the bound) could otherwise
    disagree in the 15th digit and show an admitted ledger as 4e-15 over budget.
    """
    s = spend(kind, curve, budget.delta)
    if kind in RHO_FILTERS and bound is not None and admits(kind, budget, curve, bound):
        if s.epsilon > budget.epsilon:
            return Spend(budget.epsilon, s.delta, s.method, s.order, s.candidates)
    return s


def budget_rdp_curve(kind: FilterKind, budget: Budget, bound: float | None = None) -> np.ndarray:
    """At each grid order, the largest composed RDP value that certifies ``budget`` by itself.

    rho filters: ``bound * alpha`` (the budget as a zCDP curve); ``rdp``: the larger of the
    inverted classic [M17 Prop 3] and improved [CKS20 Prop 12] conversions,
    eps_B - log1p(-1/a) + (log delta_B + log a) / (a - 1); ``rdp_union_bound``: the union-bound
    threshold eps_B - log(|grid| / delta_B) / (a - 1). A ledger whose curve lies on or below
    this one at some order is within budget (exact Gaussian or pure-DP conversions may admit
    more). Values can be negative where no ledger fits at that order. For display and checks.
    """
    a = ORDERS
    if kind in RHO_FILTERS:
        limit = filter_bound(kind, budget) if bound is None else bound
        assert limit is not None
        return limit * a
    log_delta = math.log(budget.delta)
    if kind is FilterKind.RDP_UNION_BOUND:
        return budget.epsilon - (math.log(a.size) - log_delta) / (a - 1.0)
    classic = budget.epsilon + log_delta / (a - 1.0)
    improved = budget.epsilon - np.log1p(-1.0 / a) + (log_delta + np.log(a)) / (a - 1.0)
    improved = np.where(a > 1.01, improved, -np.inf)
    return np.maximum(classic, improved)


def admits(
    kind: FilterKind, budget: Budget, total: PrivacyCurve, bound: float | None = None
) -> bool:
    """Whether a ledger composing to ``total`` (including the new charge) is within budget.

    ``bound`` is ``filter_bound(kind, budget)``; pass it when it is already known (it is
    recomputed otherwise).
    """
    if kind in RHO_FILTERS:
        if kind is FilterKind.GDP and not total.gaussian_only:
            return False
        limit = filter_bound(kind, budget) if bound is None else bound
        assert limit is not None
        return total.rho <= limit
    return spend(kind, total, budget.delta).epsilon <= budget.epsilon


__all__ = [
    "MAX_BUDGET_EPSILON",
    "MIN_BUDGET_DELTA",
    "RHO_FILTERS",
    "Budget",
    "FilterKind",
    "Spend",
    "admits",
    "budget_rdp_curve",
    "filter_bound",
    "filter_kind",
    "filter_spend",
    "spend",
    "spend_delta",
    "union_bound_epsilon",
]
