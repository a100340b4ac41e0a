"""The subsampled Gaussian's RDP at fractional orders by the Taylor series in q (L - 1), with
Lagrange's remainder (tight where sigma is large).

The Taylor series of (1 + x)^alpha in x = q (L - 1) >= -q: A = sum_{k<K} C(alpha, k) q^k M_k
+ E[R_K], M_k = E[(L - 1)^k], with Lagrange's remainder R_K = C(alpha, K) x^K (1 + xi)^{alpha - K}
of the sign of C(alpha, K) for even K > alpha, and at most C(alpha, K) q^K (1 - q)^{alpha - K}
M_K when positive. M_k = Delta^k f(0) for f(j) = E[L^j] = e^{a j (j - 1)} is a power series in
a with non-negative coefficients (the falling-factorial expansion of (j (j - 1))^n), bounded
above and below; every even K gives a bound and the least is taken. Tight where sigma is
large (A - 1 tiny); used where q e^{8a} < 1, and where it is tight to 1e-12 the signed series
is skipped.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import special

from app.accounting.orders import ORDERS
from app.accounting.rounding import TINY
from app.accounting.subsampled_gaussian.numerics import (
    IntVector,
    Mask,
    U,
    Vector,
    Work,
    blocks,
)

TAYLOR_K = 32
"""Largest truncation order of the Taylor bound."""


def taylor_useful(q: Vector, sigma: Vector) -> Mask:
    """Where the Taylor bound can work: q e^{8a} < 1 (module docstring)."""
    useful: Mask = q * np.exp(np.minimum(8.0 * 0.5 / sigma**2, 700.0)) < 1.0
    return useful


def log_moments(a: Vector, work: Work) -> tuple[Vector, Vector]:
    """Lower and upper bounds on log M_k = log E[(L - 1)^k], k = 0 .. TAYLOR_K, per row, for
    L = e^{Z / sigma - a}, Z ~ N(0, 1), a = 1 / (2 sigma^2).

    M_k = Delta^k f(0), f(j) = e^{a j (j - 1)} = sum_n a^n (j(j-1))^n / n!, and (j(j-1))^n =
    sum_m c_{n,m} j^(m) (falling factorials) with c >= 0 and c_{n+1,m} = c_{n,m-2} +
    2 (m-1) c_{n,m-1} + m (m-1) c_{n,m} (from j^(2) j^(m) = j^(m+2) + 2m j^(m+1) + m(m-1) j^(m));
    Delta^k j^(m) at 0 is k! [m = k]. So M_k = k! sum_n a^n c_{n,k} / n! >= 0, the partial sums
    are lower bounds, and since k! c_{n,k} <= (k (k-1))^n (evaluate at j = k) the tail after N is
    at most b^{N+1} / (N+1)! / (1 - b / (N+2)), b = a k (k-1). Rows where this series would be
    long (a K^2 large) get the direct alternating sum with its rounding bound instead.

    ``a`` is the float 0.5 / sigma**2, within 2 u of the true 1 / (2 sigma^2) either way; M_k is
    increasing in a, so the lower bounds are those at a (1 - 4 u) and the upper bounds those at
    a (1 + 4 u), which bracket the true a.
    """
    lo, hi = _moment_bounds(np.concatenate([a * (1.0 - 4.0 * U), a * (1.0 + 4.0 * U)]), work)
    return lo[: a.size], hi[a.size :]


def _moment_bounds(a: Vector, work: Work) -> tuple[Vector, Vector]:
    """``log_moments`` at exactly this float a."""
    k = np.arange(TAYLOR_K + 1, dtype=np.float64)
    rows = a.size
    lo = np.full((rows, k.size), -np.inf)
    hi = np.full((rows, k.size), np.inf)
    lo[:, 0] = hi[:, 0] = 0.0  # M_0 = 1; M_1 = 0 stays -inf
    b_max = a * TAYLOR_K * (TAYLOR_K - 1)
    # (rows in blocks: BLOCK elements of the series' (row, k) arrays, of the direct sums'
    # (row, k, j) arrays; every row's bounds are its own)
    on_series = np.flatnonzero(b_max <= 60.0)
    for block in blocks(on_series.size, k.size):
        series = on_series[block]
        aa = a[series, None]
        # terms of the series per row (each row's own count: a batch gives the same bounds)
        big_n = (TAYLOR_K // 2 + 12 + np.ceil(3.0 * b_max[series])).astype(np.int64)[:, None]
        v = np.zeros((series.size, k.size))
        v[:, 0] = 1.0
        acc = np.zeros_like(v)
        m = k[None, :]
        c1, c2 = 2.0 * (m - 1.0), m * (m - 1.0)
        shifted2, shifted1 = np.zeros_like(v), np.zeros_like(v)
        every_row = int(big_n.min())  # below this n every row still adds its term
        for n in range(int(big_n.max())):
            shifted2[:, 2:] = v[:, :-2]
            shifted1[:, 1:] = v[:, :-1]
            v = aa / (n + 1) * (shifted2 + c1 * shifted1 + c2 * v)
            acc += v if n < every_row else np.where(n < big_n, v, 0.0)
        work.evaluations += int(big_n.sum())
        fact = special.gammaln(k + 1.0)[None, :]
        b = aa * k * (k - 1.0)
        with np.errstate(divide="ignore", over="ignore"):
            log_tail = (big_n + 1) * np.log(np.maximum(b, 1e-300)) - special.gammaln(big_n + 2.0)
            tail = np.where(b < big_n + 2, np.exp(log_tail) / (1.0 - b / (big_n + 2)), np.inf)
            tail = np.where(b > 0, tail, 0.0)
            eta = (6.0 * big_n + 20.0) * U
            lo_s = np.log(acc) + fact + np.log1p(-eta)
            hi_s = np.log(acc * (1.0 + eta) + tail * np.exp(-fact)) + fact
        lo[series, 2:] = lo_s[:, 2:]
        hi[series, 2:] = hi_s[:, 2:]
    on_direct = np.setdiff1d(np.arange(rows), on_series)
    for block in blocks(on_direct.size, k.size**2):
        direct = on_direct[block]
        aa = a[direct, None, None]
        kk = k[None, :, None]
        jj = k[None, None, :]
        valid = jj <= kk
        log_binom = special.gammaln(kk + 1) - special.gammaln(jj + 1) - special.gammaln(kk - jj + 1)
        expo = aa * jj * (jj - 1.0)
        top = aa * kk * (kk - 1.0)
        with np.errstate(over="ignore", invalid="ignore"):
            mags = np.where(valid, np.exp(log_binom + expo - top), 0.0)
        signs = np.where((kk - jj) % 2 == 0, 1.0, -1.0)
        s = np.sum(signs * mags, axis=2)
        mag = np.sum(mags, axis=2)
        err = (k[None, :] + 4.0) * 4.0 * U * mag * (1.0 + 4.0 * U * top[:, :, 0])
        with np.errstate(divide="ignore"):
            lo_d = top[:, :, 0] + np.log(np.maximum(s - err, 0.0))
            hi_d = top[:, :, 0] + np.log(s + err)
        work.evaluations += direct.size * k.size
        lo[direct, 2:] = lo_d[:, 2:]
        hi[direct, 2:] = hi_d[:, 2:]
    return lo, hi


@lru_cache(maxsize=512)
def _binomials(alpha: float) -> tuple[Vector, Vector]:
    """log |C(alpha, k)| and its sign for k = 0 .. TAYLOR_K."""
    k = np.arange(TAYLOR_K + 1, dtype=np.float64)
    log_c = (
        special.gammaln(alpha + 1.0) - special.gammaln(k + 1.0) - special.gammaln(alpha - k + 1.0)
    )
    sign = special.gammasgn(alpha - k + 1.0)
    return log_c, sign


@lru_cache(maxsize=1)
def _binomial_table() -> tuple[Vector, Vector]:
    """``_binomials`` of every grid order (row j: ORDERS[j]), built once."""
    rows = [_binomials(float(al)) for al in ORDERS]
    log_c, sign = np.array([r[0] for r in rows]), np.array([r[1] for r in rows])
    log_c.setflags(write=False)
    sign.setflags(write=False)
    return log_c, sign


@dataclass(frozen=True)
class _TaylorOrders:
    """What the Taylor bound needs of each grid order, indexed by order (row j: ORDERS[j]):
    ``_binomials`` and the parts of the bound that do not depend on q or sigma."""

    log_c: Vector  # log |C(alpha, k)|, k = 0 .. TAYLOR_K
    positive: Mask  # C(alpha, k) > 0
    abs_log_c: Vector  # |log |C(alpha, k)||
    alpha_less_k: Vector  # alpha - k, at the even k >= 2 (the truncation orders K)
    allowed: Mask  # K even and K > alpha, at the even k >= 2


@lru_cache(maxsize=1)
def _taylor_orders() -> _TaylorOrders:
    """``_TaylorOrders`` of the grid, built once."""
    log_c, sign = _binomial_table()
    k = np.arange(TAYLOR_K + 1, dtype=np.float64)
    alpha = ORDERS[:, None]
    out = _TaylorOrders(
        log_c=log_c,
        positive=sign > 0,
        abs_log_c=np.abs(log_c),
        alpha_less_k=(alpha - k)[:, 2::2],
        allowed=((k[None, :] % 2 == 0) & (k[None, :] > alpha))[:, 2::2],
    )
    for table in (out.positive, out.abs_log_c, out.alpha_less_k, out.allowed):
        table.setflags(write=False)
    return out


def _nan_to(x: Vector, value: float) -> Vector:
    """``x`` with NaN replaced by ``value``, in place: ``np.nan_to_num(x, nan=value,
    posinf=np.inf)`` for an ``x`` that holds no -inf (the only case used here)."""
    np.copyto(x, value, where=np.isnan(x))
    return x


def _partial_sums(x: Vector) -> Vector:
    """sum_{k < K} x[..., k] at the even K = 2, 4, .., TAYLOR_K (last axis), summed in the order
    of k: the values of np.cumsum, column by column (cheaper than its accumulation along the
    last axis of many short rows)."""
    out = np.empty((*x.shape[:-1], TAYLOR_K // 2))
    acc = x[..., 0].copy()
    for k in range(1, TAYLOR_K):
        acc += x[..., k]
        if k % 2:
            out[..., k // 2] = acc
    return out


def taylor_log_am1(
    lq: Vector, l1q: Vector, orders: IntVector, moments: tuple[Vector, Vector]
) -> tuple[Vector, Mask, tuple[Vector, Vector, Vector]]:
    """Upper bounds on log(A - 1) for fractional orders by the Taylor bound (module docstring),
    +inf where no truncation order gives a positive bound; whether the bound is tight to
    1e-12 (the K-th term and the moments' spread are that small), so that nothing can improve
    it (the signed series is then skipped); and (scale, bound, gap), A - 1 being at least
    e^scale (bound - gap) (``rdp_batch``'s spread). Of every curve (``lq``, ``l1q``, its moments'
    bounds ``moments``, one row each) at every grid order ``orders`` (indices into ``ORDERS``):
    arrays (curve, order).

    Rounding: each term's log errs by a few ulps of its parts (``eta``) and of its distance to
    the scale; the terms are summed relative to the largest term up to the smallest one (no
    overflow or subnormal there; a bound past an overflowing term is infinite, never chosen;
    64 TINY covers terms that underflow); the log of the sum and the scale add a few ulps of
    both to the result.

    Computed on arrays (curve, order, k): the parts that depend on the order alone come from
    ``_taylor_orders``, those of the curve alone are computed once per curve and broadcast. The
    remainder term is needed at the even truncation orders K > alpha only (every other K's
    bound is discarded), and where C(alpha, K) > 0 only (it is 0 elsewhere): so it is computed
    at the even K of the orders with a positive C(alpha, K) there (floor(alpha) odd), and at
    the chosen K of every order for the gap."""
    m_lo, m_hi = moments
    table = _taylor_orders()
    k = np.arange(TAYLOR_K + 1, dtype=np.float64)
    log_c = table.log_c[orders][None, :, :]
    positive = table.positive[orders][None, :, :]
    lq3, l1q3 = lq[:, None, None], l1q[:, None, None]
    hi3, lo3 = m_hi[:, None, :], m_lo[:, None, :]
    log_m = np.where(positive, hi3, lo3)
    base = log_c + k * lq3  # log |C(alpha, k)| q^k, shared by the terms and the remainder
    log_t = base + log_m
    log_t[:, :, :2] = -np.inf  # k = 0 is the 1 of A, k = 1 has E[L - 1] = 0
    abs_m = np.where(
        positive,
        np.abs(np.where(np.isfinite(hi3), hi3, 0.0)),
        np.abs(np.where(np.isfinite(lo3), lo3, 0.0)),
    )
    eta = 8.0 * U * (table.abs_log_c[orders][None, :, :] + k * np.abs(lq3) + abs_m + 8.0)
    # the scale: the largest term up to the smallest one, where the (divergent) series is best
    # cut. The largest of all terms was e^554 (q = 1e-6, sigma = 0.7) to e^718 (sigma = 0.65)
    # times A - 1: scale + log(best) then cancelled (~600 - 578) and the leading terms were
    # subnormal, 1.5 % below A - 1. Terms past it that overflow give an infinite bound at their
    # K, never chosen; terms that underflow are covered by the 64 TINY added to every bound.
    # Where every moment's bound at k >= 2 is finite (nearly always), log_t is finite exactly
    # at k >= 2 and never NaN: the masks of non-finite values below are then known without
    # computing them, and no NaN needs a value (the same numbers either way)
    regular = bool(np.isfinite(m_lo[:, 2:]).all() and np.isfinite(m_hi[:, 2:]).all())
    if regular:
        finite = None
        smallest = np.argmin(log_t[:, :, 2:], axis=2) + 2
        upto = k <= smallest[:, :, None]  # (log_t is -inf at k < 2 already)
    else:
        finite = np.isfinite(log_t)
        smallest = np.argmin(np.where(finite, log_t, np.inf), axis=2)
        upto = finite & (k <= smallest[:, :, None])
    scale = np.max(np.where(upto, log_t, -np.inf), axis=2)
    scale = np.where(np.isfinite(scale), scale, 0.0)
    scale3 = scale[:, :, None]
    with np.errstate(over="ignore", invalid="ignore"):
        # exp(log_t - scale) errs by an ulp of the difference, relatively (d_t is finite where
        # log_t is: |log_t| < 1e10 there, the scale is finite)
        d_t = log_t - scale3
        if finite is None:
            abs_d = np.abs(d_t)
            abs_d[:, :, :2] = 0.0
        else:
            abs_d = np.where(finite, np.abs(d_t), 0.0)
        eta_t = eta + 2.0 * U * abs_d
        scaled = np.exp(d_t)  # (once: the terms, the bound and the gap)
        # (scaled >= 0 and 0 <= eta_t < 1: pos and neg are never -inf, only NaN needs a value)
        pos = np.where(positive, scaled * (1.0 + eta_t), 0.0)
        neg = np.where(positive, 0.0, scaled * (1.0 - eta_t))
        if not regular:
            _nan_to(pos, np.inf)
            _nan_to(neg, 0.0)
    # partial sums over k < K for every K (summed, not a sum less its last term, which loses the
    # rest where that term is large), plus the remainder at K
    cum_pos, cum_neg = _partial_sums(pos), _partial_sums(neg)
    bound = cum_pos
    # remainder term at K: C(alpha, K) q^K (1 - q)^{alpha - K} M_K when C(alpha, K) > 0
    positive_e = positive[:, :, 2::2]
    some = np.flatnonzero(np.any(positive_e[0] & table.allowed[orders], axis=1))
    if some.size:
        o = orders[some]
        l1q_k = table.alpha_less_k[o][None, :, :] * l1q3
        log_rem = base[:, some, 2::2] + l1q_k + hi3[:, :, 2::2]
        with np.errstate(over="ignore", invalid="ignore"):
            d_rem = log_rem - scale3[:, some]
            abs_rem = np.abs(d_rem) if regular else np.where(np.isfinite(d_rem), np.abs(d_rem), 0.0)
            eta_rem = eta[:, some, 2::2] + 2.0 * U * (abs_rem + np.abs(l1q_k))
            rem = np.where(positive_e[:, some], np.exp(d_rem) * (1.0 + eta_rem), 0.0)
            if not regular:
                _nan_to(rem, np.inf)
        bound[:, some] += rem
    with np.errstate(invalid="ignore"):
        bound = bound - cum_neg + 64.0 * TINY
    bound = np.where(table.allowed[orders][None, :, :] & (bound > 0), bound, np.inf)
    best_e = np.argmin(bound, axis=2)
    best = np.take_along_axis(bound, best_e[:, :, None], axis=2)[:, :, 0]
    best_k = 2 + 2 * best_e
    # how far below the bound A - 1 can be: the K-th term (|R_K| is at most it) and the spread
    # of the moments used
    kf = best_k.astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        pick = best_k[:, :, None]
        rem_at = (
            np.take_along_axis(base, pick, axis=2)[:, :, 0]
            + (ORDERS[orders][None, :] - kf) * l1q[:, None]
            + np.take_along_axis(np.broadcast_to(hi3, base.shape), pick, axis=2)[:, :, 0]
        )
        spread = np.nan_to_num(np.expm1(m_hi - m_lo), copy=False, nan=np.inf)[:, None, :]
        known = scaled if finite is None else np.where(finite, scaled, 0.0)
        gap = np.abs(np.exp(rem_at - scale)) + np.sum(
            np.where(k < best_k[:, :, None], known * spread, 0.0),
            axis=2,
        )
    tight = np.isfinite(best) & (gap <= 1e-12 * best)
    with np.errstate(divide="ignore", invalid="ignore"):
        log_best = np.log(best)
        # log(best) errs by an ulp of itself and the sum by one of the result: a few ulps of
        # both parts, not of the result (they could cancel)
        log_am1 = scale + log_best + 4.0 * U * (np.abs(scale) + np.abs(log_best))
        # and what the least A - 1 can be is made of, for ``rdp_batch``'s spread
        return np.where(np.isfinite(best), log_am1, np.inf), tight, (scale, best, gap)
