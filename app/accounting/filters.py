"""Admission rules (privacy filters) and the spend each one guarantees (DESIGN.md,
docs/formulas.md §2.6).

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
* ``rdp_fixed_orders`` accounting ``rdp``, adaptive (the default for new datasets): a Renyi filter
                      at one order fixed at creation from the budget and the allowed kinds, with
                      the improved conversion (``adaptive``: the theorem, its proof and the
                      order choice). Its stored parameters are ``Filter.params``.
* ``rdp_union_bound`` accounting ``rdp``, adaptive (datasets created before ``rdp_fixed_orders``):
                      a Renyi filter at each grid order, paying a union bound for choosing the
                      order afterwards: admit iff for some order
                      S(alpha) <= eps_B - log(|grid| / delta_B) / (alpha - 1), or the pure-DP sum
                      is within eps_B (its loss bound holds surely, so it costs no delta).
* ``pld``             accounting ``pld``, not adaptive: admission and spend come from the
                      dataset's composed privacy loss distribution (``pld_filter``); where no PLD
                      state is at hand (the RDP chart) the curve answers as the ``rdp`` rule,
                      a valid but looser bound for a fixed-parameter ledger.

**Entries with their own delta** (approximate DP, approximate zCDP / RDP; ``PrivacyCurve.delta``
is their sum): the composition is (1 - delta_e)-mixed with a ledger whose good part has the
composed curve (curve.py). If the good part is (eps, d')-DP then for every event S,
P[M(x) in S] <= (1 - delta_e)(e^eps P[A(x') in S] + d') + delta_e <= e^eps P[M(x') in S]
+ delta_e + d' (BS16 section 8, approximate zCDP to approximate DP, re-derived in this mixture
form). So a conversion at a target delta is run at d' = delta - delta_e (rounded down), its
epsilon is infinite once delta_e >= delta, and a delta at an epsilon is the conversion's plus
delta_e. The non-adaptive filters (``rdp``, ``zcdp``) admit such ledgers by that conversion.
The adaptive filters refuse them by default: the remaining d' would then depend on deltas
chosen after seeing outputs, a data-dependent threshold that neither the Renyi-filter theorem
nor Ville's inequality covers. A dataset may instead fix at creation a part D < delta_B of its
delta for them (``Filter.entry_delta``, the fixed split of Whitehouse et al. 2023): the filter
then admits while the entries' deltas add up to at most D, its own rule (bound, orders) is
computed for (eps_B, delta_B - D), and every spend converts at the target delta less D,
whatever the entries' deltas are. (D here is ``entry_delta_cap``, the split raised by 2^-30 of
itself so that a rounded-up sum of deltas whose exact sum is the split is still admitted.)
Sound under full adaptivity (docs/formulas.md §2.6): let
G(x) be the interaction in which every step runs the good part of its mechanism (the mixture
decomposition above, per neighbouring pair), and W = prod_i (1 - delta_i) along the path, a
function of the path in [0, 1] (each delta_i is fixed by the history before step i). Then
P[M(x) in S] <= E_G(x)[1_S W] + P[a bad part runs], and P[a bad part runs] = E_G(x)[1 - W]
<= E_G(x)[sum_i delta_i] <= D since the filter keeps that sum within D on every path; the
good interaction is filtered by the rule computed for delta_B - D, so it is
(eps_B, delta_B - D)-DP, which holds for [0, 1]-valued functions of the output as for events:
E_G(x)[1_S W] <= e^eps_B E_G(x')[1_S W] + delta_B - D <= e^eps_B P[M(x') in S] + delta_B - D.
So P[M(x) in S] <= e^eps_B P[M(x') in S] + delta_B. ``gdp`` (Gaussian only: no entry has a
delta) and ``rdp_union_bound`` (datasets of an earlier version) have no such split.

``Filter`` is the value object the service asks, once per charge, through ``Filter.dry_run``
(as dp_accounting's ``supports()`` is a dry run of ``compose()``). Each kind is one ``_Rule``
in the table ``_RULES``: its bound, its epsilon candidates and its delta candidates. The
admission rule itself is written once, in ``Filter._within``.

The module-level functions (``spend``, ``spend_delta``, ``admits``, ``filter_spend``,
``filter_bound``, ``budget_rdp_curve``) are the earlier interface, kept as thin wrappers.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np

from app.accounting import conversions as conv
from app.accounting.adaptive import RenyiFilter, choose_filter
from app.accounting.curve import PrivacyCurve, Vector
from app.accounting.orders import ORDERS
from app.accounting.rounding import add_up, mul_up, sub_down, up


class FilterKind(StrEnum):
    """The admission rule of a dataset (see module docstring)."""

    GDP = "gdp"
    ZCDP_FILTER = "zcdp_filter"
    ZCDP = "zcdp"
    RDP = "rdp"
    RDP_UNION_BOUND = "rdp_union_bound"
    RDP_FIXED_ORDERS = "rdp_fixed_orders"
    PLD = "pld"


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
    """The filter a dataset gets from its settings at creation. ``pld`` needs ``adaptive: false``:
    privacy loss distributions compose mechanisms fixed in advance, and no PLD filter is known to
    be valid when parameters depend on earlier outputs (natural PLD filters can fail,
    arXiv 2602.06756, 2602.15815)."""
    if accounting not in ("rdp", "zcdp", "pld"):
        raise ValueError(f"accounting must be 'rdp', 'zcdp' or 'pld', got {accounting!r}")
    if accounting == "pld":
        if adaptive:
            raise ValueError(
                "accounting 'pld' needs adaptive: false (every mechanism's parameters fixed in "
                "advance): no privacy-loss-distribution filter is valid under adaptivity; use "
                "accounting 'rdp' (adaptive) or set adaptive: false"
            )
        return FilterKind.PLD
    if allowed_mechanisms is not None and set(allowed_mechanisms) == {"gaussian"}:
        return FilterKind.GDP
    if accounting == "zcdp":
        return FilterKind.ZCDP_FILTER if adaptive else FilterKind.ZCDP
    return FilterKind.RDP_FIXED_ORDERS if adaptive else FilterKind.RDP


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


@dataclass(frozen=True)
class Remaining:
    """What is left of a budget: ``epsilon`` (budget minus spend: composition is not additive,
    so an indication; the filter decides), ``delta`` and, for rho filters, the exact ``rho``
    left under the filter's bound at what the entries' own deltas leave of the budget delta
    (``Filter.rho_bound``; None for RDP filters), and for a filter that sets part of its delta
    aside for entries' own deltas, ``entry_delta``: what they may still add up to (else None)."""

    epsilon: float
    delta: float
    rho: float | None
    entry_delta: float | None = None


@dataclass(frozen=True)
class DryRun:
    """The answer to "may ``new`` be charged?" (``Filter.dry_run``).

    ``admitted`` is decided on committed + held + new; ``after`` = committed + new is what the
    ledger becomes if the charge is recorded, and ``spend_after`` its spend under the filter.
    """

    admitted: bool
    after: PrivacyCurve
    spend_after: Spend


# --- one rule per filter kind ----------------------------------------------------------------

Candidates = tuple[dict[str, float], dict[str, float]]
"""(values by method, Renyi order by method where a grid order decides)."""


def _mu(curve: PrivacyCurve) -> float:
    return math.sqrt(2.0 * curve.rho)


def union_bound_epsilon(rdp: Vector, delta: float) -> tuple[float, float]:
    """Classic conversion at delta / |grid|: the adaptive RDP filter's guarantee,
    min_j r_j + (log |grid| - log delta) / (alpha_j - 1), in log space (delta / |grid| would
    underflow for delta near the smallest float)."""
    delta = conv.check_delta(delta)
    r = np.asarray(rdp, dtype=np.float64)
    eps = r + (math.log(ORDERS.size) - math.log(delta)) / (ORDERS - 1.0)
    j = int(np.argmin(eps))
    return max(0.0, up(float(eps[j]), 4)), float(ORDERS[j])


def _gdp_epsilon(curve: PrivacyCurve, delta: float) -> Candidates:
    """Exact Gaussian conversion; no guarantee at all (infinite epsilon) for a ledger that is
    not Gaussian-only, which the filter never admits."""
    if not curve.gaussian_only:
        return {"not_gaussian": math.inf}, {}
    return {"gaussian_exact": conv.gaussian_epsilon(_mu(curve), delta)}, {}


def _gdp_delta(curve: PrivacyCurve, epsilon: float) -> Candidates:
    if not curve.gaussian_only:
        return {"not_gaussian": 1.0}, {}
    return {"gaussian_exact": conv.gaussian_delta(_mu(curve), epsilon)}, {}


def _zcdp_epsilon_with(exact_gaussian: bool) -> Callable[[PrivacyCurve, float], Candidates]:
    def candidates(curve: PrivacyCurve, delta: float) -> Candidates:
        c = {
            "zcdp_bun_steinke": conv.zcdp_epsilon_bun_steinke(curve.rho, delta),
            "zcdp_cks": conv.zcdp_epsilon_cks(curve.rho, delta),
        }
        if exact_gaussian and curve.gaussian_only:
            c["gaussian_exact"] = conv.gaussian_epsilon(_mu(curve), delta)
        return c, {}

    return candidates


def _zcdp_delta_with(exact_gaussian: bool) -> Callable[[PrivacyCurve, float], Candidates]:
    def candidates(curve: PrivacyCurve, epsilon: float) -> Candidates:
        c = {
            "zcdp_bun_steinke": conv.zcdp_delta_bun_steinke(curve.rho, epsilon),
            "zcdp_cks": conv.zcdp_delta_cks(curve.rho, epsilon),
        }
        if exact_gaussian and curve.gaussian_only:
            c["gaussian_exact"] = conv.gaussian_delta(_mu(curve), epsilon)
        return c, {}

    return candidates


def _rdp_epsilon(curve: PrivacyCurve, delta: float) -> Candidates:
    values, orders = _zcdp_epsilon_with(True)(curve, delta)
    values["rdp_improved"], orders["rdp_improved"] = conv.rdp_epsilon_improved(curve.rdp, delta)
    values["rdp_classic"], orders["rdp_classic"] = conv.rdp_epsilon_classic(curve.rdp, delta)
    values["pure_dp"] = curve.pure_eps
    return values, orders


def _rdp_delta(curve: PrivacyCurve, epsilon: float) -> Candidates:
    values, orders = _zcdp_delta_with(True)(curve, epsilon)
    values["rdp_improved"], orders["rdp_improved"] = conv.rdp_delta_improved(curve.rdp, epsilon)
    values["rdp_classic"], orders["rdp_classic"] = conv.rdp_delta_classic(curve.rdp, epsilon)
    values["pure_dp"] = 0.0 if epsilon >= curve.pure_eps else 1.0
    return values, orders


def _union_bound_epsilon(curve: PrivacyCurve, delta: float) -> Candidates:
    eps, order = union_bound_epsilon(curve.rdp, delta)
    return {"rdp_union_bound": eps, "pure_dp": curve.pure_eps}, {"rdp_union_bound": order}


def _union_bound_delta(curve: PrivacyCurve, epsilon: float) -> Candidates:
    d, order = conv.rdp_delta_classic(curve.rdp, epsilon)
    values = {
        "rdp_union_bound": min(1.0, up(d * ORDERS.size, 2)),
        "pure_dp": 0.0 if epsilon >= curve.pure_eps else 1.0,
    }
    return values, {"rdp_union_bound": order}


def _gdp_bound(budget: Budget) -> float:
    """mu_B^2 / 2 with mu_B the largest mu whose exact delta(eps_B) <= delta_B, rounded down."""
    mu = conv.gaussian_mu_for_budget(budget.epsilon, budget.delta)
    bound = mu * mu / 2.0
    while bound > 0 and conv.gaussian_delta(math.sqrt(2.0 * bound), budget.epsilon) > budget.delta:
        bound = float(np.nextafter(bound, 0.0))
    return bound


def _zcdp_bound(budget: Budget) -> float:
    """The largest rho whose tightest zCDP conversion is within budget."""
    return conv.zcdp_rho_for_budget(budget.epsilon, budget.delta)


@functools.lru_cache(maxsize=256)
def _rho_bound_at(epsilon: float, delta: float) -> float:
    """The largest rho whose tightest zCDP conversion at ``delta`` is within ``epsilon`` (0 when
    ``delta`` is not positive): a rho filter's bound at what entries' own deltas leave."""
    return conv.zcdp_rho_for_budget(epsilon, delta) if delta > 0.0 else 0.0


def _no_bound(budget: Budget) -> None:
    return None


def _rho_budget_curve(budget: Budget, bound: float | None) -> Vector:
    """The budget as a zCDP curve: ``bound * alpha``."""
    assert bound is not None
    return bound * ORDERS


def _rdp_budget_curve(budget: Budget, bound: float | None) -> Vector:
    """The larger of the inverted classic [M17 Prop 3] and improved [CKS20 Prop 12] conversions,
    eps_B - log1p(-1/a) + (log delta_B + log a) / (a - 1)."""
    a, log_delta = ORDERS, math.log(budget.delta)
    classic = budget.epsilon + log_delta / (a - 1.0)
    improved = budget.epsilon - np.log1p(-1.0 / a) + (log_delta + np.log(a)) / (a - 1.0)
    return np.maximum(classic, np.where(a > 1.01, improved, -np.inf))


def _union_bound_budget_curve(budget: Budget, bound: float | None) -> Vector:
    """The union-bound threshold eps_B - log(|grid| / delta_B) / (a - 1)."""
    a = ORDERS
    return budget.epsilon - (math.log(a.size) - math.log(budget.delta)) / (a - 1.0)


@dataclass(frozen=True)
class _Rule:
    """One filter kind: how its bound is computed, what it may report, how it admits.

    ``by_rho``: admission is ``total.rho <= bound`` (no conversion); otherwise admission is the
    reported epsilon at the budget delta being within the budget epsilon.
    ``adaptive``: valid under fully adaptive parameter choice (entries' own deltas only within
    the part of the delta budget the filter sets aside for them, ``Filter.entry_delta``).
    ``gaussian_only``: only Gaussian-only ledgers are admitted (the GDP theorem).
    """

    bound: Callable[[Budget], float | None]
    epsilon: Callable[[PrivacyCurve, float], Candidates]
    delta: Callable[[PrivacyCurve, float], Candidates]
    budget_curve: Callable[[Budget, float | None], Vector]
    by_rho: bool
    adaptive: bool
    gaussian_only: bool = False


_RULES: dict[FilterKind, _Rule] = {
    FilterKind.GDP: _Rule(
        _gdp_bound,
        _gdp_epsilon,
        _gdp_delta,
        _rho_budget_curve,
        by_rho=True,
        adaptive=True,
        gaussian_only=True,
    ),
    FilterKind.ZCDP_FILTER: _Rule(
        _zcdp_bound,
        _zcdp_epsilon_with(False),
        _zcdp_delta_with(False),
        _rho_budget_curve,
        by_rho=True,
        adaptive=True,
    ),
    FilterKind.ZCDP: _Rule(
        _zcdp_bound,
        _zcdp_epsilon_with(True),
        _zcdp_delta_with(True),
        _rho_budget_curve,
        by_rho=True,
        adaptive=False,
    ),
    FilterKind.RDP: _Rule(
        _no_bound, _rdp_epsilon, _rdp_delta, _rdp_budget_curve, by_rho=False, adaptive=False
    ),
    FilterKind.RDP_UNION_BOUND: _Rule(
        _no_bound,
        _union_bound_epsilon,
        _union_bound_delta,
        _union_bound_budget_curve,
        by_rho=False,
        adaptive=True,
    ),
}


_RULES[FilterKind.PLD] = _RULES[FilterKind.RDP]  # the curve's answer where no PLD is at hand


@functools.lru_cache(maxsize=1024)
def _fixed_orders_rule(rf: RenyiFilter) -> _Rule:
    """The rule of an ``rdp_fixed_orders`` filter with stored parameters ``rf``: the odometer
    reading at the fixed orders (``RenyiFilter.epsilon_spent``), or the pure-DP sum."""

    def epsilon(curve: PrivacyCurve, delta: float) -> Candidates:
        e, order = rf.epsilon_spent(curve.rdp, math.inf, delta)
        return {"rdp_fixed_orders": e, "pure_dp": curve.pure_eps}, (
            {} if order is None else {"rdp_fixed_orders": order}
        )

    def delta(curve: PrivacyCurve, eps: float) -> Candidates:
        values = {
            "rdp_fixed_orders": rf.delta_spent(curve.rdp, math.inf, eps),
            "pure_dp": 0.0 if eps >= curve.pure_eps else 1.0,
        }
        return values, {}

    def budget_curve(budget: Budget, bound: float | None) -> Vector:
        out = np.full(ORDERS.shape, -np.inf)
        out[np.searchsorted(ORDERS, np.array(rf.orders))] = np.array(rf.thresholds)
        return out

    return _Rule(_no_bound, epsilon, delta, budget_curve, by_rho=False, adaptive=True)


def _pick(values: dict[str, float], orders: dict[str, float]) -> tuple[str, float, float | None]:
    method = min(values, key=lambda k: (values[k], k))
    return method, values[method], orders.get(method)


REFUSES_ENTRY_DELTA = "adaptive_filter_refuses_entry_delta"
ENTRY_DELTAS_EXCEED = "entry_deltas_reach_delta"
ENTRY_DELTAS_BEYOND_SET_ASIDE = "entry_deltas_exceed_entry_delta_budget"


def pure_spend(total: PrivacyCurve) -> Spend:
    """The spend at delta = 0: the pure-DP sum when no entry has a delta of its own, else
    infinite. Basic composition holds pathwise, adaptive choices included (every step's loss is
    bounded by its epsilon on every outcome), so this holds for every filter [DR14 Thm 3.16;
    RRUV16]."""
    eps = total.pure_eps if total.delta == 0.0 else math.inf
    return Spend(eps, 0.0, "pure_dp", None, {"pure_dp": eps})


def _beyond_set_aside(rule: _Rule, total: PrivacyCurve, set_aside: float) -> str | None:
    """Why an adaptive filter with ``set_aside`` (its ``entry_delta``) gives no guarantee for
    ``total``: its entries' own deltas with nothing set aside, or beyond what is; else None."""
    if not rule.adaptive or total.delta <= set_aside:
        return None
    return REFUSES_ENTRY_DELTA if set_aside == 0.0 else ENTRY_DELTAS_BEYOND_SET_ASIDE


def _spend_at(rule: _Rule, total: PrivacyCurve, delta: float, set_aside: float = 0.0) -> Spend:
    """The least candidate epsilon at ``delta``, the conversions run at what the entries' own
    deltas leave of it; under an adaptive filter, at what the part it sets aside for them
    (``set_aside``) leaves, whatever they add up to within it (module docstring)."""
    delta = conv.check_delta(delta)
    why = _beyond_set_aside(rule, total, set_aside)
    if why is not None:
        return Spend(math.inf, delta, why, None, {why: math.inf})
    left = sub_down(delta, set_aside if rule.adaptive else total.delta)
    if left <= 0.0:
        return Spend(math.inf, delta, ENTRY_DELTAS_EXCEED, None, {ENTRY_DELTAS_EXCEED: math.inf})
    values, orders = rule.epsilon(total, left)
    method, best, order = _pick(values, orders)
    return Spend(epsilon=best, delta=delta, method=method, order=order, candidates=values)


def _spend_delta(rule: _Rule, total: PrivacyCurve, epsilon: float, set_aside: float = 0.0) -> Spend:
    """The least candidate delta at ``epsilon``, plus the entries' own deltas (under an adaptive
    filter, plus the part it sets aside for them, ``set_aside``)."""
    epsilon = conv.check_epsilon(epsilon)
    why = _beyond_set_aside(rule, total, set_aside)
    if why is not None:
        return Spend(epsilon, 1.0, why, None, {why: 1.0})
    values, orders = rule.delta(total, epsilon)
    extra = set_aside if rule.adaptive else total.delta
    if extra > 0.0:
        values = {k: min(1.0, add_up(v, extra)) for k, v in values.items()}
    method, best, order = _pick(values, orders)
    return Spend(epsilon=epsilon, delta=best, method=method, order=order, candidates=values)


SETS_ENTRY_DELTA_ASIDE = frozenset({FilterKind.ZCDP_FILTER, FilterKind.RDP_FIXED_ORDERS})
"""The filters that may set part of their delta aside for entries' own deltas."""


ENTRY_DELTA_SLACK = 2.0**-30
"""How far above a split D the entries' own deltas, summed and rounded up, may reach
(``entry_delta_cap``). Their running sum is rounded up at every addition, so k deltas whose
exact sum is D can sum to a float a few ulps above D: four 1e-6 add up to 4.000000000000001e-06
although 4 x 1e-6 == 4e-06 exactly in binary. Comparing with D itself refused the last of
them. A rounded-up sum is never below the exact one, so comparing it with D (1 + 2^-30) admits
every ledger whose exact sum is within D, as long as the rounding (at most one ulp per
addition) stays below 2^-30 D: about four million additions."""


def entry_delta_cap(entry_delta: float) -> float:
    """What a split ``entry_delta`` (D) lets the entries' own deltas, summed and rounded up,
    reach: D (1 + ``ENTRY_DELTA_SLACK``), rounded up (0 for no split). The filter's own rule
    and its conversions then take this, not D, out of the budget delta: the proof (module
    docstring) holds with it in place of D."""
    return mul_up(entry_delta, 1.0 + ENTRY_DELTA_SLACK) if entry_delta > 0.0 else 0.0


def check_entry_delta_budget(kind: FilterKind, budget: Budget, entry_delta: float) -> None:
    """ValueError unless ``entry_delta`` (the part of the budget delta set aside for entries'
    own deltas) is 0, or in (0, delta_B) on a filter that sets one aside: the adaptive ones but
    ``gdp`` (Gaussian only: no entry has a delta) and ``rdp_union_bound`` (an earlier version's
    datasets). Non-adaptive filters need none: they admit entries' deltas up to the budget
    delta by the conversion at what those leave. ``entry_delta_cap`` must be below delta_B too
    (a split within 2^-30 of the budget delta leaves the filter's own rule nothing)."""
    if entry_delta == 0.0:
        return
    if not (math.isfinite(entry_delta) and 0.0 < entry_delta < budget.delta):
        raise ValueError(
            f"entry_delta_budget must be in [0, budget delta = {budget.delta:g}), "
            f"got {entry_delta!r}"
        )
    if entry_delta_cap(entry_delta) >= budget.delta:
        raise ValueError(
            f"entry_delta_budget {entry_delta!r} leaves nothing of the budget delta "
            f"{budget.delta!r} to the filter's own rule: the entries' deltas, summed and "
            "rounded up, may reach it times (1 + 2^-30); give a smaller one"
        )
    if kind not in SETS_ENTRY_DELTA_ASIDE:
        why = (
            "its filter admits Gaussian mechanisms only, which have no delta of their own"
            if kind is FilterKind.GDP
            else "its filter, of an earlier version, has no such split"
            if kind is FilterKind.RDP_UNION_BOUND
            else "a non-adaptive dataset admits entries' own deltas up to its budget delta"
        )
        raise ValueError(f"entry_delta_budget applies to adaptive datasets only: {why}")


def good_budget(budget: Budget, entry_delta: float) -> Budget:
    """The budget the rule of a filter that sets ``entry_delta`` aside is made for:
    (eps_B, delta_B - ``entry_delta_cap(entry_delta)``), rounded down."""
    return Budget(budget.epsilon, sub_down(budget.delta, entry_delta_cap(entry_delta)))


# --- the value object --------------------------------------------------------------------------


@dataclass(frozen=True)
class Filter:
    """A dataset's admission rule: its ``kind``, ``budget`` and, for the rho filters (gdp,
    zcdp, zcdp_filter), the largest admissible total ``bound`` on rho (None for RDP kinds);
    for ``rdp_fixed_orders`` its stored ``params`` (orders, weights, thresholds).

    ``entry_delta``: the part of the budget delta an adaptive filter sets aside, at creation,
    for entries with their own delta (0: it refuses them); its bound or parameters are then
    those of (eps_B, delta_B - entry_delta) (module docstring).

    Build it with ``Filter.create(kind, budget, allowed_mechanisms)`` (computes the bound or
    parameters once) or, when they are stored, ``Filter(kind, budget, bound, params)``.
    """

    kind: FilterKind
    budget: Budget
    bound: float | None = None
    params: RenyiFilter | None = None
    entry_delta: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", FilterKind(self.kind))
        check_entry_delta_budget(self.kind, self.budget, self.entry_delta)
        if self.kind is FilterKind.RDP_FIXED_ORDERS and self.params is None:
            raise ValueError("the rdp_fixed_orders filter needs its parameters (Filter.create)")
        if self.rule.by_rho and self.bound is None:
            raise ValueError(f"the {self.kind} filter needs its rho bound (use Filter.create)")

    @classmethod
    def create(
        cls,
        kind: FilterKind,
        budget: Budget,
        allowed_mechanisms: Sequence[str] | None = None,
        orders: Sequence[float] | None = None,
        entry_delta: float = 0.0,
    ) -> Filter:
        """The filter of ``kind`` for ``budget``, its bound or parameters computed once (for
        the budget less ``entry_delta``, the part set aside for entries' own deltas).

        ``rdp_fixed_orders``: the order comes from the budget and ``allowed_mechanisms``
        (``adaptive.choose_filter``), unless ``orders`` keeps those of an existing filter (a
        budget change must not re-pick the order after the ledger was seen)."""
        kind = FilterKind(kind)
        check_entry_delta_budget(kind, budget, entry_delta)
        own = budget if entry_delta == 0.0 else good_budget(budget, entry_delta)
        params = None
        if kind is FilterKind.RDP_FIXED_ORDERS:
            params = (
                choose_filter(own.epsilon, own.delta, allowed_mechanisms)
                if orders is None
                else RenyiFilter.create(own.epsilon, own.delta, orders)
            )
        bound = _RULES[kind].bound(own) if kind in _RULES else None
        return cls(kind, budget, bound, params, entry_delta)

    @property
    def entry_delta_cap(self) -> float:
        """What the entries' own deltas, summed and rounded up, may reach under this filter's
        split (``entry_delta_cap``; 0 without one)."""
        return entry_delta_cap(self.entry_delta)

    def params_dict(self) -> dict[str, Any] | None:
        """``params`` as stored with a dataset and answered as ``filter_params`` (None: a filter
        without fixed orders)."""
        return self.params.to_dict() if self.params is not None else None

    @property
    def rule(self) -> _Rule:
        if self.params is not None:
            return _fixed_orders_rule(self.params)
        return _RULES[self.kind]

    # -- spend -------------------------------------------------------------------------------

    def spend_at(self, total: PrivacyCurve, delta: float) -> Spend:
        """The epsilon at ``delta`` this filter's conversions give for the composed ``total``."""
        return _spend_at(self.rule, total, delta, self.entry_delta_cap)

    def spend_delta(self, total: PrivacyCurve, epsilon: float) -> Spend:
        """The delta at ``epsilon`` this filter's conversions give for the composed ``total``."""
        return _spend_delta(self.rule, total, epsilon, self.entry_delta_cap)

    def entry_deltas_fit(self, total: PrivacyCurve) -> bool:
        """Whether the entries' own deltas of ``total`` leave this filter a guarantee: none, or
        within the part an adaptive filter sets aside for them, or (other filters) below the
        budget delta."""
        if total.delta == 0.0:
            return True
        if self.rule.adaptive:
            return total.delta <= self.entry_delta_cap
        return total.delta < self.budget.delta

    def spend(self, total: PrivacyCurve) -> Spend:
        """``spend_at`` the budget's delta, consistent with admission.

        For the rho filters the admission rule is ``rho <= bound``, and the bound was checked to
        give (eps_B, delta_B) when it was computed. While the ledger is within that bound the
        filter itself certifies eps_B, so the reported epsilon is capped at eps_B: two numerical
        routes (root finding for epsilon, bisection for the bound) could otherwise disagree in
        the 15th digit and show an admitted ledger as 4e-15 over budget.
        """
        s = self.spend_at(total, self.budget.delta)
        if self.rule.by_rho and s.epsilon > self.budget.epsilon and self._within_bound(total):
            return Spend(self.budget.epsilon, s.delta, s.method, s.order, s.candidates)
        return s

    # -- admission ---------------------------------------------------------------------------

    def admits_by_bound(self, total: PrivacyCurve) -> bool:
        """Whether a rho filter admits ``total`` by its bound: no entries' own deltas, or
        (adaptive) deltas within the part set aside for them, for which the bound was made."""
        return total.delta == 0.0 or (self.rule.adaptive and self.entry_deltas_fit(total))

    def _within_bound(self, total: PrivacyCurve) -> bool:
        """rho filters, for a ledger admitted by the bound (``admits_by_bound``): rho within it."""
        assert self.bound is not None
        if self.rule.gaussian_only and not total.gaussian_only:
            return False
        return self.admits_by_bound(total) and total.rho <= self.bound

    def _within(self, total: PrivacyCurve, spend: Callable[[], Spend]) -> bool:
        """THE admission rule. Entries' own deltas: admitted by an adaptive filter only within
        the part it sets aside for them, by the others only below the budget delta
        (``entry_deltas_fit``). Then rho filters compare rho with the bound (no conversion;
        a non-adaptive one with entries' deltas converts at what they leave) and RDP filters
        compare the spend at the budget delta (``spend()``, called only here) with the budget
        epsilon."""
        if not self.entry_deltas_fit(total):
            return False
        if self.rule.by_rho and self.admits_by_bound(total):
            return self._within_bound(total)
        return spend().epsilon <= self.budget.epsilon

    def admits(self, total: PrivacyCurve) -> bool:
        """Whether a ledger composing to ``total`` (including the new charge) is within budget."""
        return self._within(total, lambda: self.spend(total))

    def dry_run(
        self,
        committed: PrivacyCurve,
        held: PrivacyCurve | None,
        new: PrivacyCurve,
        additions: int = 1,
    ) -> DryRun:
        """May ``new`` be charged to a ledger composing to ``committed`` with active holds
        ``held``? Admission is decided on (committed + held) + new, in that order: the sum the
        views' ``remaining`` starts from and a calibration adds its candidate to (rounded
        additions are not associative, and a calibrated answer on the edge was one ulp over
        (committed + new) + held). ``additions``: the terms that may reach the ledger in
        another order than this sum's (the new entry, each active hold, or each part of a batch
        charged as one), each a rounded addition: with more than one, admission checks an upper
        bound on every order (``with_holds_bound``), so that no order of commits leaves the
        stored ledger above the budget (a random search found one ulp over). The spend reported
        is that of ``after`` = committed + new. At most one conversion when there are no holds
        (the rho filters need none for admission; the RDP filters use the reported spend for
        both).
        """
        after = committed + new
        spend_after = self.spend(after)
        if held is None and additions <= 1:
            admitted = self._within(after, lambda: spend_after)
        else:
            everything = with_holds_bound(committed, held, new, additions)
            admitted = self._within(everything, lambda: self.spend(everything))
        return DryRun(admitted=admitted, after=after, spend_after=spend_after)

    # -- views -------------------------------------------------------------------------------

    def remaining(self, total: PrivacyCurve, spent: Spend | None = None) -> Remaining:
        """What is left of the budget after ``total`` (``spent``: its ``spend()``, when known)."""
        s = self.spend(total) if spent is None else spent
        rho = None
        if self.rule.by_rho:  # rounded down, as every remaining value (a spend is rounded up)
            rho = max(0.0, sub_down(self.rho_bound(total), total.rho))
        room = None
        if self.entry_delta > 0.0:
            room = max(0.0, sub_down(self.entry_delta, total.delta))
        return Remaining(
            epsilon=max(0.0, sub_down(self.budget.epsilon, s.epsilon)),
            delta=max(0.0, sub_down(self.budget.delta, total.delta)),
            rho=rho,
            entry_delta=room,
        )

    def rho_bound(self, total: PrivacyCurve) -> float:
        """rho filters: the largest total rho admitted beside the entries' own deltas of
        ``total``. Without them, ``bound``. With them, none more under an adaptive filter or
        once they reach the budget delta; else the largest rho whose zCDP conversion at what
        they leave of the budget delta is within the budget epsilon (``_within``'s rule for
        such ledgers: the bound for the whole budget delta would overstate it)."""
        assert self.bound is not None
        if not self.entry_deltas_fit(total):
            return 0.0
        if self.admits_by_bound(total):
            return self.bound
        return _rho_bound_at(self.budget.epsilon, sub_down(self.budget.delta, total.delta))

    def exhausted(self, total: PrivacyCurve, spent: Spend | None = None) -> bool:
        """No budget left: the bound is reached (rho filters), the spend reaches eps_B, or the
        entries' own deltas reach the budget delta (``spent``: ``spend(total)``, when known)."""
        if total.delta >= self.budget.delta:
            return True
        if self.rule.by_rho and self.admits_by_bound(total):
            assert self.bound is not None
            if total.rho >= self.bound or not self._within_bound(total):
                return True
        return (self.spend(total) if spent is None else spent).epsilon >= self.budget.epsilon

    def budget_curve(self) -> Vector:
        """At each grid order, the largest composed RDP value that certifies the budget by
        itself: ``bound * alpha`` for rho filters; the inverted RDP conversion the filter uses
        otherwise. A ledger whose curve lies on or below it at some order is within budget
        (exact Gaussian or pure-DP conversions may admit more). Values can be negative where no
        ledger fits at that order. For display and checks."""
        return self.rule.budget_curve(self.budget, self.bound)


# --- the earlier functional interface (thin wrappers) ----------------------------------------


def _filter(kind: FilterKind, budget: Budget, bound: float | None) -> Filter:
    """The filter for the functional wrappers (its bound or parameters computed when needed
    and not given)."""
    kind = FilterKind(kind)
    if kind not in _RULES:
        return Filter.create(kind, budget)
    if _RULES[kind].by_rho and bound is None:
        bound = _RULES[kind].bound(budget)
    return Filter(kind, budget, bound)


def _budgetless(kind: FilterKind) -> _Rule:
    kind = FilterKind(kind)
    if kind not in _RULES:
        raise ValueError(
            f"the {kind.value} filter's spend depends on its stored parameters: ask its Filter"
        )
    return _RULES[kind]


def with_holds_bound(
    committed: PrivacyCurve, held: PrivacyCurve | None, new: PrivacyCurve, additions: int
) -> PrivacyCurve:
    """What admission checks for ``new`` beside active holds summing to ``held``:
    (committed + held) + new, raised to bound every order in which its ``additions`` terms (the
    new entry or its parts, and the holds) may reach the ledger (``PrivacyCurve.reorder_bound``;
    a calibration adds its candidate to committed + held the same way)."""
    base = committed if held is None else committed + held
    total = base + new
    return total if additions <= 1 else total.reorder_bound(additions)


def spend(kind: FilterKind, curve: PrivacyCurve, delta: float) -> Spend:
    """The epsilon at ``delta`` that filter ``kind`` guarantees for composed ``curve``
    (``Filter.spend_at``; kinds with stored parameters need their ``Filter``)."""
    return _spend_at(_budgetless(kind), curve, delta)


def spend_delta(kind: FilterKind, curve: PrivacyCurve, epsilon: float) -> Spend:
    """The delta at ``epsilon`` that filter ``kind`` guarantees for composed ``curve``
    (``Filter.spend_delta``; kinds with stored parameters need their ``Filter``)."""
    return _spend_delta(_budgetless(kind), curve, epsilon)


def filter_bound(kind: FilterKind, budget: Budget) -> float | None:
    """For rho-based filters, the largest admissible total rho; None for RDP filters."""
    return Filter.create(kind, budget).bound


def filter_spend(
    kind: FilterKind, curve: PrivacyCurve, budget: Budget, bound: float | None
) -> Spend:
    """``Filter(kind, budget, bound).spend(curve)``."""
    return _filter(kind, budget, bound).spend(curve)


def budget_rdp_curve(kind: FilterKind, budget: Budget, bound: float | None = None) -> Vector:
    """``Filter(kind, budget, bound).budget_curve()``."""
    return _filter(kind, budget, bound).budget_curve()


def admits(
    kind: FilterKind, budget: Budget, total: PrivacyCurve, bound: float | None = None
) -> bool:
    """``Filter(kind, budget, bound).admits(total)`` (the bound is computed when not given)."""
    return _filter(kind, budget, bound).admits(total)


__all__ = [
    "ENTRY_DELTAS_BEYOND_SET_ASIDE",
    "ENTRY_DELTAS_EXCEED",
    "MAX_BUDGET_EPSILON",
    "REFUSES_ENTRY_DELTA",
    "MIN_BUDGET_DELTA",
    "RHO_FILTERS",
    "SETS_ENTRY_DELTA_ASIDE",
    "Budget",
    "DryRun",
    "Filter",
    "FilterKind",
    "Remaining",
    "Spend",
    "admits",
    "budget_rdp_curve",
    "ENTRY_DELTA_SLACK",
    "check_entry_delta_budget",
    "entry_delta_cap",
    "filter_bound",
    "filter_kind",
    "filter_spend",
    "good_budget",
    "spend",
    "spend_delta",
    "union_bound_epsilon",
    "with_holds_bound",
]
