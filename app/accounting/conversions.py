"""Conversions from zCDP, RDP and Gaussian-DP to (epsilon, delta), each in both directions.

All functions are sound: any order alpha gives a valid bound, so an imprecise optimiser only
costs tightness, and roots are finished on the safe side. ``delta`` must lie in (0, 1) and
``epsilon`` be >= 0 (``ValueError`` otherwise). Results are never negative or NaN.

Sources (FORMULAS.md section 2): Bun-Steinke [BS16 Prop 3 / 1.3]; Canonne-Kamath-Steinke
[CKS20 Cor 13]; Mironov [M17 Prop 3]; improved RDP conversion [CKS20 Prop 12, BBGHS20 Thm 21,
ALCKS20 eq. 20]; analytic Gaussian [BW18 Thm 8, DRS19 Cor 2.13].
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt
from scipy import optimize, special

from app.accounting.orders import ORDERS
from app.accounting.rounding import up

Vector = npt.NDArray[np.float64]


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
    """eps = rho + 2 sqrt(rho log(1/delta)) [BS16 Prop 3]."""
    rho, delta = _check_rho(rho), check_delta(delta)
    if math.isinf(rho):
        return math.inf
    return up(rho + 2.0 * math.sqrt(rho * math.log(1.0 / delta)), 2)


def zcdp_delta_bun_steinke(rho: float, epsilon: float) -> float:
    """delta = exp(-(eps - rho)^2 / (4 rho)) for eps >= rho, else 1 [BS16 Prop 3]."""
    rho, epsilon = _check_rho(rho), check_epsilon(epsilon)
    if rho == 0.0:
        return 0.0
    if math.isinf(rho) or epsilon <= rho:
        return 1.0
    return min(1.0, up(math.exp(-((epsilon - rho) ** 2) / (4.0 * rho)), 2))


def _cks_eps_at(t: Vector, rho: float, log_inv_delta: float) -> Vector:
    """alpha rho + log1p(-1/alpha) + (log(1/delta) - log alpha) / (alpha - 1), alpha = 1 + e^t."""
    am1 = np.exp(t)
    a = 1.0 + am1
    return a * rho + np.log1p(-1.0 / a) + (log_inv_delta - np.log(a)) / am1


def zcdp_epsilon_cks(rho: float, delta: float) -> float:
    """eps(delta) = inf_alpha [alpha rho + log1p(-1/alpha) + (log(1/delta) - log alpha)/(alpha-1)]
    [CKS20 Cor 13; FORMULAS.md 2.1(b)(ii)], and 0 when delta >= sqrt(1 - e^{-rho}) (total
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
    return max(0.0, up(best, 4))


def zcdp_delta_cks(rho: float, epsilon: float) -> float:
    """delta(eps) = inf_alpha e^{(alpha-1)(alpha rho - eps)} / (alpha-1) (1 - 1/alpha)^alpha
    [CKS20 Cor 13], capped by the total-variation bound sqrt(1 - e^{-rho}) and by 1.

    The derivative (2 alpha - 1) rho - eps + log(1 - 1/alpha) is increasing, so the minimiser is
    its root, bracketed as in FORMULAS.md 2.1(b).
    """
    rho, epsilon = _check_rho(rho), check_epsilon(epsilon)
    if rho == 0.0:
        return 0.0
    if math.isinf(rho):
        return 1.0

    def log_delta(a: float) -> float:
        return (a - 1.0) * (a * rho - epsilon) + a * math.log1p(-1.0 / a) - math.log(a - 1.0)

    def deriv(a: float) -> float:
        return (2.0 * a - 1.0) * rho - epsilon + math.log1p(-1.0 / a)

    lo = max(1.0 + 1e-9, (1.0 + epsilon / rho) / 2.0)
    hi = (epsilon + 1.0) / (2.0 * rho) + 2.0
    if deriv(lo) >= 0:
        a_star = lo
    else:
        a_star = optimize.brentq(deriv, lo, hi, xtol=1e-14, rtol=4 * np.finfo(float).eps)
    value = math.exp(min(log_delta(a_star), 0.0))
    tv = math.sqrt(-math.expm1(-rho))
    return min(1.0, up(value, 4), tv)


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
    """(eps, order) with eps = min_j r_j + log(1/delta) / (alpha_j - 1) [M17 Prop 3]."""
    r, a = _check_curve(rdp, orders)
    delta = check_delta(delta)
    eps = r + math.log(1.0 / delta) / (a - 1.0)
    j = int(np.argmin(eps))
    return max(0.0, up(float(eps[j]), 4)), float(a[j])


def rdp_delta_classic(rdp: Vector, epsilon: float, orders: Vector = ORDERS) -> tuple[float, float]:
    """(delta, order) with delta = min_j exp((alpha_j - 1)(r_j - eps)) [M17 Prop 3]."""
    r, a = _check_curve(rdp, orders)
    epsilon = check_epsilon(epsilon)
    with np.errstate(invalid="ignore", over="ignore"):  # -inf for a huge epsilon: delta 0
        log_d = (a - 1.0) * (r - epsilon)
    log_d = np.where(np.isnan(log_d), np.inf, log_d)
    j = int(np.argmin(log_d))
    return min(1.0, up(math.exp(min(float(log_d[j]), 0.0)), 4)), float(a[j])


def rdp_epsilon_improved(rdp: Vector, delta: float, orders: Vector = ORDERS) -> tuple[float, float]:
    """(eps, order): eps = min_j r_j + log1p(-1/a_j) - (log delta + log a_j) / (a_j - 1)
    [CKS20 Prop 12; BBGHS20 Thm 21], and eps = 0 at an order whose total-variation bound
    sqrt(1 - e^{-r_j}) is below delta (as dp_accounting; orders <= 1.01 are skipped)."""
    r, a = _check_curve(rdp, orders)
    delta = check_delta(delta)
    eps = r + np.log1p(-1.0 / a) - (math.log(delta) + np.log(a)) / (a - 1.0)
    eps = np.where(delta * delta + np.expm1(-r) > 0, 0.0, eps)
    eps = np.where(a > 1.01, eps, np.inf)
    j = int(np.argmin(eps))
    return max(0.0, up(float(eps[j]), 4)), float(a[j])


def rdp_delta_improved(rdp: Vector, epsilon: float, orders: Vector = ORDERS) -> tuple[float, float]:
    """(delta, order): min_j of exp((a-1)(r - eps + log1p(-1/a)) - log a) and sqrt(1 - e^{-r})."""
    r, a = _check_curve(rdp, orders)
    epsilon = check_epsilon(epsilon)
    with np.errstate(divide="ignore", invalid="ignore"):
        log_tv = 0.5 * np.log1p(-np.exp(-r))
        log_imp = (a - 1.0) * (r - epsilon + np.log1p(-1.0 / a)) - np.log(a)
    log_imp = np.where(np.isnan(log_imp) | (a <= 1.01), np.inf, log_imp)
    log_d = np.minimum(log_tv, log_imp)
    j = int(np.argmin(log_d))
    return min(1.0, up(math.exp(min(float(log_d[j]), 0.0)), 4)), float(a[j])


# --- exact Gaussian (mu-GDP) ----------------------------------------------------------------


def gaussian_delta(mu: float, epsilon: float) -> float:
    """delta(eps) = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2) [BW18 Thm 8; DRS19 Cor 2.13],
    in log space: log delta = log_ndtr(a) + log(-expm1(eps + log_ndtr(b) - log_ndtr(a)))."""
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
    inner = epsilon + lb - la
    if inner >= 0.0:  # only possible through rounding when delta underflows
        return 0.0
    log_d = la + math.log(-math.expm1(inner))
    return min(1.0, up(math.exp(log_d), 8))


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
    hi = rho + 2.0 * math.sqrt(rho * math.log(1.0 / delta)) + 1.0
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
