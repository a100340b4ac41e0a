"""Conversions from zCDP, RDP and Gaussian-DP to (epsilon, delta), each in both directions.

All functions are sound: any order alpha gives a valid bound, so an imprecise optimiser only
costs tightness, and roots are finished on the safe side. ``delta`` must lie in (0, 1) and
``epsilon`` be >= 0 (``ValueError`` otherwise). Results are never negative or NaN.

Rounding: every formula is a short sum of terms, some of which cancel. Each result is raised by
a bound on its own rounding, a few units of roundoff u = 2^-53 times the sum of the magnitudes
of its terms (not of the result: when terms of size 100 cancel to 0.1, the error is that of
the terms), and values from exp get ``exp_up`` (the least positive float for an underflow, 0
only for an exact 0). The exact-Gaussian delta carries the error of its two log-CDF values
through the cancellation between them (interval arithmetic on the log-space formula), so its
safety margin is relative and grows where they nearly cancel (tiny mu): about 1e-15 relative
for mu ~ 1, up to ~1e-5 relative in delta for mu ~ 1e-9.

Sources (docs/formulas.md section 2): Bun-Steinke [BS16 Prop 3 / 1.3]; Canonne-Kamath-Steinke
[CKS20 Cor 13]; Mironov [M17 Prop 3]; improved RDP conversion [CKS20 Prop 12, BBGHS20 Thm 21,
ALCKS20 eq. 20]; analytic Gaussian [BW18 Thm 8, DRS19 Cor 2.13].
"""

from __future__ import annotations

import math
import sys

import numpy as np
import numpy.typing as npt
from scipy import optimize, special

from app.accounting.orders import ORDERS
from app.accounting.rounding import exp_up, up

Vector = npt.NDArray[np.float64]

U = 2.0**-53
"""Unit roundoff of float64."""


def check_delta(delta: float) -> float:
    """``delta`` as a float in (0, 1), else ``ValueError``."""
    d = float(delta)
    if not (math.isfinite(d) and 0.0 < d < 1.0):
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")
    return d


def check_epsilon(epsilon: float) -> float:
    """``epsilon`` as a finite float >= 0, else ``ValueError``."""
    e = float(epsilon)
    if not (math.isfinite(e) and e >= 0.0):
        raise ValueError(f"epsilon must be finite and >= 0, got {epsilon!r}")
    return e


def _check_rho(rho: float) -> float:
    r = float(rho)
    if math.isnan(r) or r < 0:
        raise ValueError(f"rho must be >= 0, got {rho!r}")
    return r


# --- zCDP -> (eps, delta) ---------------------------------------------------------------------


def zcdp_epsilon_bun_steinke(rho: float, delta: float) -> float:
    """eps = rho + 2 sqrt(rho log(1/delta)) [BS16 Prop 3]. log(1/delta) as -log(delta): 1/delta
    overflows for a subnormal delta (what entries' own deltas leave of 2^-1022), which made the
    bound infinite, and NaN (0 * inf) for rho = 0."""
    rho, delta = _check_rho(rho), check_delta(delta)
    if math.isinf(rho):
        return math.inf
    log_inv = -math.log(delta)
    product = rho * log_inv
    # a subnormal product keeps too few bits (rho = 5e-324: 100 % low); the square roots of its
    # factors are normal and correctly rounded, and their product errs by an ulp or two
    root = (
        math.sqrt(product) if product >= sys.float_info.min else math.sqrt(rho) * math.sqrt(log_inv)
    )
    return up(rho + 2.0 * root, 4)


def zcdp_delta_bun_steinke(rho: float, epsilon: float) -> float:
    """delta = exp(-(eps - rho)^2 / (4 rho)) for eps >= rho, else 1 [BS16 Prop 3]."""
    rho, epsilon = _check_rho(rho), check_epsilon(epsilon)
    if rho == 0.0:
        return 0.0
    if math.isinf(rho) or epsilon <= rho:
        return 1.0
    gap = epsilon - rho
    log_d = -(gap * gap) / (4.0 * rho)  # -inf, not OverflowError, past 1e154
    # an overflow to -inf stands for an underflow (rho > 0, the bound is positive), not for an
    # exact 0: a delta of 0 is a pure-DP claim (exp_up gives the least positive float)
    return min(1.0, exp_up(max(log_d * (1.0 - 8.0 * U), -float(np.finfo(float).max))))


def _cks_eps_at(t: Vector, rho: float, log_inv_delta: float) -> Vector:
    """alpha rho + log1p(-1/alpha) + (log(1/delta) - log alpha) / (alpha - 1), alpha = 1 + e^t
    (alpha - 1 taken from the rounded alpha, exactly), raised by its rounding bound."""
    a = 1.0 + np.exp(t)
    am1 = a - 1.0
    l1 = np.log1p(-1.0 / a)
    tail = (log_inv_delta - np.log(a)) / am1
    value: Vector = a * rho + l1 + tail
    return value + 8.0 * U * (a * rho + np.abs(l1) + (log_inv_delta + np.log(a)) / am1 + 1.0)


def zcdp_epsilon_cks(rho: float, delta: float) -> float:
    """eps(delta) = inf_alpha [alpha rho + log1p(-1/alpha) + (log(1/delta) - log alpha)/(alpha-1)]
    [CKS20 Cor 13; docs/formulas.md §2.1(b)(ii)], and 0 when delta >= sqrt(1 - e^{-rho}) (total
    variation).

    Scan over t = log(alpha - 1) in [-12, 30], then bounded Brent around the best point; the
    value at the returned order is itself a valid bound.
    """
    rho, delta = _check_rho(rho), check_delta(delta)
    if rho == 0.0:
        return 0.0
    if math.isinf(rho):
        return math.inf
    if delta * delta + math.expm1(-rho) > 0:
        return 0.0
    log_inv_delta = -math.log(delta)
    t = np.linspace(-12.0, 30.0, 841)
    values = _cks_eps_at(t, rho, log_inv_delta)
    i = int(np.argmin(values))
    lo, hi = float(t[max(i - 1, 0)]), float(t[min(i + 1, t.size - 1)])
    res = optimize.minimize_scalar(
        lambda s: float(_cks_eps_at(np.array([s]), rho, log_inv_delta)[0]),
        bounds=(lo, hi),
        method="bounded",
        options={"xatol": 1e-10},
    )
    best = min(float(values[i]), float(res.fun))
    return max(0.0, up(best, 2))


def zcdp_delta_cks(rho: float, epsilon: float) -> float:
    """delta(eps) = inf_alpha e^{(alpha-1)(alpha rho - eps)} / (alpha-1) (1 - 1/alpha)^alpha
    [CKS20 Cor 13], capped by the total-variation bound sqrt(1 - e^{-rho}) and by 1.

    The derivative (2 alpha - 1) rho - eps + log(1 - 1/alpha) is increasing, so the minimiser is
    its root, bracketed as in docs/formulas.md §2.1(b).
    """
    rho, epsilon = _check_rho(rho), check_epsilon(epsilon)
    if rho == 0.0:
        return 0.0
    if math.isinf(rho):
        return 1.0

    def deriv(a: float) -> float:
        return (2.0 * a - 1.0) * rho - epsilon + math.log1p(-1.0 / a)

    # (both ends kept below 1e300: with rho near the least float they overflow, and any
    # order bounds delta, so an end is used as it is when the root lies beyond it)
    lo = min(max(1.0 + 1e-9, (1.0 + epsilon / rho) / 2.0), 1e300)
    hi = min((epsilon + 1.0) / (2.0 * rho) + 2.0, 1e300)

    # solved for t = log(alpha - 1): the bracket spans up to ~230 in t when rho is tiny
    # (alpha* ~ 1 / sqrt(2 rho) ~ 7e49 at rho = 1e-100), where Brent's method on alpha itself
    # ran out of iterations. Every alpha > 1 gives a valid bound, so the root's precision only
    # decides tightness, and an end whose rounded derivative already has the root's sign is
    # taken as it is.
    def slope(t: float) -> float:
        return deriv(1.0 + math.exp(t))

    t_lo, t_hi = math.log(lo - 1.0), math.log(hi - 1.0)
    if slope(t_lo) >= 0:
        t_star = t_lo
    elif slope(t_hi) <= 0:
        t_star = t_hi
    else:
        t_star = optimize.brentq(
            slope, t_lo, t_hi, xtol=1e-13, rtol=4 * np.finfo(float).eps, maxiter=400
        )
    # the bound at the order alpha = 1 + m, m = e^{t*} as a float, evaluated from m itself:
    # alpha log(1 - 1/alpha) - log(alpha - 1) is m log m - (1 + m) log1p(m) for m < 1 and
    # -(1 + m) log1p(1/m) - log m above, no part cancelling another. log1p(-1 / alpha) from the
    # rounded alpha errs by u / m (condition 1 / (alpha - 1)), and its -13 and log(alpha - 1)'s
    # +13 cancelled: delta was 9.4e-12 below the CKS infimum at alpha* = 1 + 1.7e-6.
    m = math.exp(t_star)
    a = 1.0 + m
    first = m * (a * rho - epsilon)
    if m < 1.0:
        second, third = m * math.log(m), -a * math.log1p(m)
    else:
        second, third = -a * math.log1p(1.0 / m), -math.log(m)
    log_d = first + second + third
    err = 8.0 * U * (m * (a * rho + epsilon) + abs(second) + abs(third) + 1.0)
    tv = up(math.sqrt(-math.expm1(-rho)), 4)
    return min(1.0, exp_up(min(log_d + err, 0.0)), tv)


def zcdp_epsilon(rho: float, delta: float) -> float:
    """The tightest of Bun-Steinke and Canonne-Kamath-Steinke."""
    return min(zcdp_epsilon_bun_steinke(rho, delta), zcdp_epsilon_cks(rho, delta))


def zcdp_rho_for_budget(epsilon: float, delta: float) -> float:
    """The largest rho whose ``zcdp_epsilon(rho, delta)`` is <= epsilon (bisection, kept on the
    feasible side), i.e. the zCDP filter's budget."""
    epsilon, delta = check_epsilon(epsilon), check_delta(delta)
    if epsilon == 0.0:
        return 0.0
    lo, hi = 0.0, epsilon + 1.0
    while zcdp_epsilon(hi, delta) <= epsilon:
        lo, hi = hi, hi * 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            break
        if zcdp_epsilon(mid, delta) <= epsilon:
            lo = mid
        else:
            hi = mid
    return lo


# --- RDP grid -> (eps, delta) ----------------------------------------------------------------


def _check_curve(rdp: Vector, orders: Vector) -> tuple[Vector, Vector]:
    r = np.asarray(rdp, dtype=np.float64)
    a = np.asarray(orders, dtype=np.float64)
    if r.shape != a.shape:
        raise ValueError(f"rdp and orders differ in length: {r.shape} vs {a.shape}")
    if (a <= 1.0).any():
        raise ValueError("orders must all be > 1")
    if np.isnan(r).any() or (r < 0).any():
        raise ValueError("rdp values must be >= 0")
    return r, a


def rdp_epsilon_classic(rdp: Vector, delta: float, orders: Vector = ORDERS) -> tuple[float, float]:
    """(eps, order) with eps = min_j r_j + log(1/delta) / (alpha_j - 1) [M17 Prop 3] (-log(delta):
    1/delta overflows for a subnormal delta)."""
    r, a = _check_curve(rdp, orders)
    delta = check_delta(delta)
    eps = (r + -math.log(delta) / (a - 1.0)) * (1.0 + 8.0 * U)  # positive terms
    j = int(np.argmin(eps))
    return max(0.0, up(float(eps[j]), 1)), float(a[j])


def rdp_delta_classic(rdp: Vector, epsilon: float, orders: Vector = ORDERS) -> tuple[float, float]:
    """(delta, order) with delta = min_j exp((alpha_j - 1)(r_j - eps)) [M17 Prop 3]."""
    r, a = _check_curve(rdp, orders)
    epsilon = check_epsilon(epsilon)
    with np.errstate(invalid="ignore", over="ignore"):  # -inf for a huge epsilon: delta 0
        log_d = (a - 1.0) * (r - epsilon) + 8.0 * U * ((a - 1.0) * (r + epsilon) + 1.0)
    log_d = np.where(np.isnan(log_d), np.inf, log_d)
    j = int(np.argmin(log_d))
    return min(1.0, exp_up(min(float(log_d[j]), 0.0))), float(a[j])


def rdp_epsilon_improved(rdp: Vector, delta: float, orders: Vector = ORDERS) -> tuple[float, float]:
    """(eps, order): eps = min_j r_j + log1p(-1/a_j) - (log delta + log a_j) / (a_j - 1)
    [CKS20 Prop 12; BBGHS20 Thm 21], and eps = 0 at an order whose total-variation bound
    sqrt(1 - e^{-r_j}) is below delta (as dp_accounting). dp_accounting skips orders <= 1.01
    as numerically unstable; here every order's value is raised by its rounding bound instead
    (the terms cancel most near alpha = 1, so the bound grows there)."""
    r, a = _check_curve(rdp, orders)
    delta = check_delta(delta)
    log_delta = math.log(delta)
    l1 = np.log1p(-1.0 / a)
    tail = (log_delta + np.log(a)) / (a - 1.0)
    err = 8.0 * U * (r + np.abs(l1) + (abs(log_delta) + np.log(a)) / (a - 1.0) + 1.0)
    eps = r + l1 - tail + err
    tv = delta * delta * (1.0 - 8.0 * U) + np.expm1(-r) * (1.0 + 8.0 * U) > 0
    eps = np.where(tv, 0.0, eps)
    j = int(np.argmin(eps))
    return max(0.0, up(float(eps[j]), 1)), float(a[j])


def rdp_delta_improved(rdp: Vector, epsilon: float, orders: Vector = ORDERS) -> tuple[float, float]:
    """(delta, order): min_j of exp((a-1)(r - eps + log1p(-1/a)) - log a) and sqrt(1 - e^{-r})."""
    r, a = _check_curve(rdp, orders)
    epsilon = check_epsilon(epsilon)
    with np.errstate(divide="ignore", invalid="ignore"):
        log_tv = 0.5 * np.log1p(-np.exp(-r))
        log_tv = log_tv + 8.0 * U * (np.abs(log_tv) + 1.0 / np.maximum(-np.expm1(-r), 1e-300))
        l1 = np.log1p(-1.0 / a)
        log_imp = (a - 1.0) * (r - epsilon + l1) - np.log(a)
        log_imp = log_imp + 8.0 * U * ((a - 1.0) * (r + epsilon + np.abs(l1)) + np.log(a) + 1.0)
    log_imp = np.where(np.isnan(log_imp), np.inf, log_imp)
    log_d = np.minimum(np.where(np.isnan(log_tv), np.inf, log_tv), log_imp)
    j = int(np.argmin(log_d))
    return min(1.0, exp_up(min(float(log_d[j]), 0.0))), float(a[j])


# --- exact Gaussian (mu-GDP) ----------------------------------------------------------------


def gaussian_delta(mu: float, epsilon: float) -> float:
    """delta(eps) = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2) [BW18 Thm 8; DRS19 Cor 2.13],
    in log space: log delta = log_ndtr(a) + log(-expm1(eps + log_ndtr(b) - log_ndtr(a))),
    evaluated with error bounds: a and b err by 2u (eps/mu + mu/2) (this covers an error of an
    ulp in mu too), log_ndtr by 4u (|value| + 1) plus its slope (<= |x| + 1) times its argument's
    error; the inner sum takes the sum of those; delta is then computed at the inner value
    pushed down by its error (larger delta) and the outer log pushed up (module docstring)."""
    epsilon = check_epsilon(epsilon)
    mu = float(mu)
    if math.isnan(mu) or mu < 0:
        raise ValueError(f"mu must be >= 0, got {mu!r}")
    if mu == 0.0:
        return 0.0
    if math.isinf(mu):
        return 1.0
    a = -epsilon / mu + mu / 2.0
    b = -epsilon / mu - mu / 2.0
    la, lb = float(special.log_ndtr(a)), float(special.log_ndtr(b))
    e_ab = 4.0 * U * (epsilon / mu + mu / 2.0)
    e_la = 4.0 * U * (abs(la) + 1.0) + (abs(a) + 1.0) * e_ab
    e_lb = 4.0 * U * (abs(lb) + 1.0) + (abs(b) + 1.0) * e_ab
    inner = epsilon + lb - la
    e_inner = 4.0 * U * (epsilon + abs(lb) + abs(la)) + e_la + e_lb
    low = inner - e_inner
    # low >= 0 would mean no positive delta at all, which cannot be: fall back on delta <= Phi(a)
    log_gap = math.log(-math.expm1(low)) if low < 0.0 else 0.0
    log_d = la + e_la + log_gap + 4.0 * U * (abs(la) + abs(log_gap) + 1.0)
    return min(1.0, exp_up(log_d))


def gaussian_epsilon(mu: float, delta: float) -> float:
    """Least eps with gaussian_delta(mu, eps) <= delta (brentq, then stepped up until it holds)."""
    delta = check_delta(delta)
    mu = float(mu)
    if mu == 0.0:
        return 0.0
    if math.isinf(mu):
        return math.inf
    if gaussian_delta(mu, 0.0) <= delta:
        return 0.0
    rho = mu * mu / 2.0
    hi = rho + 2.0 * math.sqrt(rho * -math.log(delta)) + 1.0  # (1/delta overflows if subnormal)
    while gaussian_delta(mu, hi) > delta:
        hi *= 2.0
    log_target = math.log(delta)

    def f(e: float) -> float:
        d = gaussian_delta(mu, e)
        return (math.log(d) if d > 0 else -800.0) - log_target

    eps = float(optimize.brentq(f, 0.0, hi, xtol=1e-14, rtol=4 * np.finfo(float).eps))
    step = max(abs(eps) * 1e-15, 1e-300)
    while gaussian_delta(mu, eps) > delta:
        eps += step
        step *= 2.0
    # finish by bisection to float resolution: the least eps found to satisfy the bound, so
    # that a budget the Gaussian-DP filter admits is never reported as exceeded by rounding
    lo = max(0.0, eps - 64 * max(step, abs(eps) * 1e-14))
    if gaussian_delta(mu, lo) <= delta:
        return lo
    for _ in range(80):
        mid = 0.5 * (lo + eps)
        if mid in (lo, eps):
            break
        if gaussian_delta(mu, mid) <= delta:
            eps = mid
        else:
            lo = mid
    return eps


def gaussian_mu_for_budget(epsilon: float, delta: float) -> float:
    """The largest mu with gaussian_delta(mu, epsilon) <= delta (the Gaussian-DP filter budget)."""
    epsilon, delta = check_epsilon(epsilon), check_delta(delta)
    lo, hi = 0.0, 1.0
    while gaussian_delta(hi, epsilon) <= delta:
        lo, hi = hi, hi * 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            break
        if gaussian_delta(mid, epsilon) <= delta:
            lo = mid
        else:
            hi = mid
    return lo


__all__ = [
    "check_delta",
    "check_epsilon",
    "gaussian_delta",
    "gaussian_epsilon",
    "gaussian_mu_for_budget",
    "rdp_delta_classic",
    "rdp_delta_improved",
    "rdp_epsilon_classic",
    "rdp_epsilon_improved",
    "zcdp_delta_bun_steinke",
    "zcdp_delta_cks",
    "zcdp_epsilon",
    "zcdp_epsilon_bun_steinke",
    "zcdp_epsilon_cks",
    "zcdp_rho_for_budget",
]
