"""RDP of the Poisson-subsampled Gaussian mechanism (DP-SGD), exact series of MTZ19 section 3.3.

Setting: each record is included independently with probability q, contributions clipped to
L2 norm C, N(0, sigma^2 C^2) noise added (sigma = noise multiplier); neighbours add or remove
one record. The worst pair is one-dimensional: mu0 = N(0, sigma^2), mu = (1-q) mu0 + q N(1, sigma^2)
and eps(alpha) = D_alpha(mu || mu0) = log(A_alpha) / (alpha - 1) (FORMULAS.md 1.8).

* Integer alpha (MTZ19 case I): A = sum_i C(a,i) q^i (1-q)^{a-i} exp((i^2 - i) / (2 sigma^2)).
  Since the binomial weights sum to 1, A - 1 = sum_{i>=2} w_i expm1((i^2-i)/(2 sigma^2)) with
  every term positive; we sum that in log space and return log1p(A - 1), exact to a few ulps
  even when eps(alpha) is 1e-12.
* Fractional alpha (MTZ19 case II): the generalised binomial series split at
  z0 = sigma^2 log(1/q - 1) + 1/2, **keeping the signs** of C(a, i) for i > a (dp_accounting
  0.6.0 sums absolute values and overstates eps near alpha = 1 by up to 3x). Positive and
  negative terms are accumulated separately in log space. The terms decay geometrically
  (ratio ~ exp(-1/(2 sigma^2))); we sum until the last block is below e^-45 of the total and add
  a bound on the rounding error and on the tail, so the value stays an upper bound. If the
  series would need more than MAX_TERMS terms (sigma above ~60), the order falls back to the
  sound convexity interpolation of (alpha-1) eps(alpha) between its integer neighbours
  (FORMULAS.md 2.5; WBK19 Cor 10).

Edge cases as dp_accounting and Opacus: q = 0 gives 0, q = 1 the Gaussian alpha / (2 sigma^2).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
import numpy.typing as npt
from scipy import special

from app.accounting.closed_forms import log_expm1
from app.accounting.orders import ORDERS

Vector = npt.NDArray[np.float64]

MAX_TERMS = 400_000
_BLOCK = 2048


def _logsumexp(x: Vector) -> float:
    """log(sum(exp(x))) (plain numpy: scipy's version costs ~0.2 ms of overhead per call)."""
    if x.size == 0:
        return -math.inf
    m = float(np.max(x))
    if not math.isfinite(m):
        return m
    return m + math.log(float(np.sum(np.exp(x - m))))


@lru_cache(maxsize=64)
def _log_binomials(alpha: int) -> tuple[Vector, Vector]:
    """(i, log C(alpha, i)) for i = 2..alpha (independent of q and sigma, so cached)."""
    i = np.arange(2, alpha + 1, dtype=np.float64)
    log_c = (
        special.gammaln(alpha + 1.0) - special.gammaln(i + 1.0) - special.gammaln(alpha - i + 1.0)
    )
    return i, log_c


def log_a_int(q: float, sigma: float, alpha: int) -> float:
    """log A_alpha for integer alpha >= 2, via log1p(A - 1) with all terms positive."""
    i, log_c = _log_binomials(alpha)
    log_w = log_c + i * math.log(q) + (alpha - i) * math.log1p(-q)
    log_terms = log_w + log_expm1((i * i - i) / (2.0 * sigma * sigma))
    log_am1 = _logsumexp(log_terms)
    # a relative rounding margin of 64 ulps on A - 1 keeps the value an upper bound
    return float(np.logaddexp(0.0, log_am1 + 64 * 2.0**-52))


def log_a_frac(q: float, sigma: float, alpha: float) -> float | None:
    """log A_alpha for fractional alpha by the signed generalised binomial series.

    Returns None when the series would need more than MAX_TERMS terms or cancels beyond
    double precision (the caller then interpolates between integer orders).
    """
    log_q, log_1mq = math.log(q), math.log1p(-q)
    z0 = sigma * sigma * math.log(1.0 / q - 1.0) + 0.5
    two_s2 = 2.0 * sigma * sigma
    log_gamma_a1 = special.gammaln(alpha + 1.0)
    pos: list[float] = []
    neg: list[float] = []
    abs_total = -math.inf
    start = 0
    last_block_max = math.inf
    while True:
        if start >= MAX_TERMS:
            return None
        i = np.arange(start, start + _BLOCK, dtype=np.float64)
        j = alpha - i
        log_abs_c = log_gamma_a1 - special.gammaln(i + 1.0) - special.gammaln(j + 1.0)
        sign = special.gammasgn(j + 1.0)
        log_t1 = i * log_q + j * log_1mq + (i * i - i) / two_s2 + special.log_ndtr((z0 - i) / sigma)
        log_t2 = j * log_q + i * log_1mq + (j * j - j) / two_s2 + special.log_ndtr((j - z0) / sigma)
        log_term = log_abs_c + np.logaddexp(log_t1, log_t2)
        p = log_term[sign > 0]
        n = log_term[sign < 0]
        if p.size:
            pos.append(_logsumexp(p))
        if n.size:
            neg.append(_logsumexp(n))
        abs_total = float(np.logaddexp(abs_total, _logsumexp(log_term)))
        block_max = float(log_term.max())
        start += _BLOCK
        # stop once terms are decreasing and negligible (the series decays geometrically)
        if i[0] > alpha + 1 and block_max < last_block_max and block_max < abs_total - 45.0:
            last_term = float(log_term[-1])
            break
        last_block_max = block_max
    log_pos = _logsumexp(np.asarray(pos)) if pos else -math.inf
    log_neg = _logsumexp(np.asarray(neg)) if neg else -math.inf
    if not log_neg < log_pos:
        return None  # cancellation beyond double precision: use the sound interpolation
    # everything relative to the positive sum, in log space (A can exceed 1e308)
    a_rel = -math.expm1(log_neg - log_pos)
    # margin: rounding (a few ulps of the absolute sum per block) plus a geometric tail bound
    ratio = math.exp(-1.0 / two_s2)
    tail_rel = math.exp(last_term - log_pos) / max(1.0 - ratio, 1e-300) * 4.0
    round_rel = math.exp(abs_total - log_pos) * 2.0**-52 * (16 + 2 * len(pos) + 2 * len(neg))
    return log_pos + math.log(a_rel + round_rel + tail_rel)


def subsampled_gaussian_rdp_at(q: float, sigma: float, alpha: float) -> float:
    """eps(alpha) of one step; exact series (upper bound to rounding)."""
    if q == 0.0:
        return 0.0
    if q == 1.0:
        return alpha / (2.0 * sigma * sigma)
    if float(alpha).is_integer():
        value = log_a_int(q, sigma, int(alpha)) / (alpha - 1.0)
    else:
        log_a = log_a_frac(q, sigma, alpha)
        if log_a is None:
            return _interpolated(q, sigma, alpha)
        value = log_a / (alpha - 1.0)
    # never above the unsampled Gaussian (joint convexity), a sound cap for rounding noise
    return max(0.0, min(value, alpha / (2.0 * sigma * sigma)))


def _interpolated(q: float, sigma: float, alpha: float) -> float:
    """Sound upper bound at fractional alpha from the two neighbouring integers (convexity of
    (alpha - 1) eps(alpha), FORMULAS.md 0.1 and 2.5)."""
    lo, hi = math.floor(alpha), math.ceil(alpha)
    g_lo = 0.0 if lo == 1 else log_a_int(q, sigma, lo)
    g_hi = log_a_int(q, sigma, hi)
    w = (alpha - lo) / (hi - lo)
    return ((1.0 - w) * g_lo + w * g_hi) / (alpha - 1.0)


@lru_cache(maxsize=256)
def subsampled_gaussian_rdp(q: float, sigma: float) -> Vector:
    """One step's RDP on the grid ``ORDERS`` (cached per (q, sigma); read-only)."""
    out = subsampled_gaussian_rdp_window(q, sigma, np.ones(ORDERS.shape, dtype=bool))
    out.setflags(write=False)
    return out


def subsampled_gaussian_rdp_window(q: float, sigma: float, mask: npt.NDArray[np.bool_]) -> Vector:
    """One step's RDP at the orders where ``mask`` is true and +inf elsewhere.

    +inf is a valid (vacuous) bound, so conversions of such a vector are sound, only looser:
    calibration searches with a few orders and checks the full grid once at the end.
    """
    out = np.full(ORDERS.shape, np.inf)
    for idx in np.flatnonzero(mask):
        out[idx] = subsampled_gaussian_rdp_at(q, sigma, float(ORDERS[idx]))
    # eps(alpha) is non-decreasing in alpha, so the running maximum from the left is still an
    # upper bound at every order (it only removes rounding wiggles)
    finite = np.isfinite(out)
    if finite.any():
        running = np.maximum.accumulate(np.where(finite, out, 0.0))
        out = np.where(finite, running, np.inf)
    return out


__all__ = [
    "MAX_TERMS",
    "log_a_frac",
    "log_a_int",
    "subsampled_gaussian_rdp",
    "subsampled_gaussian_rdp_at",
    "subsampled_gaussian_rdp_window",
]
