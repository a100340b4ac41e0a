"""The subsampled Gaussian's RDP at fractional orders by the signed series of MTZ19 case II.

The signed series of MTZ19 case II (split at z0 = sigma^2 log(1/q - 1) + 1/2), **signs kept**
(dp_accounting 0.6.0 sums absolute values). For i > alpha the coefficients C(alpha, i)
alternate in sign and a_i = |C(alpha, i)| (X_i + Y_i) is a Hausdorff moment sequence, so the
alternating rest after ``SERIES_HEAD`` terms is bounded above and below by Euler's transform
of the next terms (``mtz_log_a``); the head is summed without cancellation (TwoSum
cascade, A - 1 taken as (hi - 1) + lo), and every term's rounding is bounded. Fixed work:
``SERIES_TERMS`` terms per order.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import special

from app.accounting.orders import ORDERS
from app.accounting.subsampled_gaussian.numerics import IntVector, Mask, U, Vector, Work

SERIES_HEAD = 12
SERIES_TERMS = 32
"""Signed-series terms per fractional order: ``SERIES_HEAD`` summed, the next ones bound the
alternating rest by Euler's transform (to about 2^-39 of the first term left out)."""


def _tree_sum(x: Vector) -> Vector:
    """Sum along the last axis by explicit pairwise halving (zero-padded to a power of two), so
    that the rounding error is at most ceil(log2(length)) u times the sum of |x| (Higham,
    Accuracy and Stability of Numerical Algorithms, 2nd ed., section 4.2)."""
    width = 1 << max(0, (x.shape[-1] - 1).bit_length())
    if width != x.shape[-1]:
        pad = np.zeros((*x.shape[:-1], width - x.shape[-1]))
        x = np.concatenate([x, pad], axis=-1)
    while x.shape[-1] > 1:
        x = x[..., 0::2] + x[..., 1::2]
    return x[..., 0]


def _sum2(x: Vector) -> tuple[Vector, Vector]:
    """Sum along the last axis as hi + lo (Ogita, Rump, Oishi 2005, Sum2: a cascade of error-free
    TwoSum transformations): |sum - (hi + lo)| <= (n u)^2 sum |x|."""
    hi = np.zeros(x.shape[:-1])
    lo = np.zeros(x.shape[:-1])
    for col in range(x.shape[-1]):
        y = x[..., col]
        s = hi + y
        bb = s - hi
        lo += (hi - (s - bb)) + (y - bb)
        hi = s
    return hi, lo


def _log_ndtr_slope(x: Vector) -> Vector:
    """An upper bound on the slope phi(x) / Phi(x) of log Phi: 2 phi(x) for x >= 0 (Phi >= 1/2),
    |x| + 1 below (the Mills ratio bound Phi(x) >= phi(x) |x| / (x^2 + 1) for x <= -1, and
    phi / Phi <= phi(1) / Phi(-1) < 2 on [-1, 0], where it decreases)."""
    return np.where(x >= 0.0, 2.0 * np.exp(-0.5 * x * x) / np.sqrt(2.0 * np.pi), np.abs(x) + 1.0)


@dataclass(frozen=True)
class _SeriesOrders:
    """What the signed series needs of each grid order (row j: ORDERS[j]; column i the term),
    the values the series computed per row before: j = alpha - i, log |C(alpha, i)| by its
    recurrence, the signs, and the parts of the rounding and magnitudes made of them alone."""

    j: Vector
    log_c: Vector
    sign: Vector
    c_err: Vector  # 4 i (|log |C(alpha, i)|| + 1)
    jj_less_j: Vector  # j^2 - j
    jj_plus_abs_j: Vector  # j^2 + |j|
    abs_j: Vector


@lru_cache(maxsize=1)
def _series_orders() -> _SeriesOrders:
    """``_SeriesOrders`` of the grid, built once (the rows of integer orders are never used:
    their recurrence reaches log 0)."""
    al = ORDERS[:, None]
    i = np.arange(SERIES_TERMS, dtype=np.float64)[None, :]
    j = al - i
    # log |C(alpha, i)| by the recurrence |C(alpha, i)| = |C(alpha, i-1)| |alpha - i + 1| / i
    with np.errstate(divide="ignore"):
        steps = np.log(np.abs(j + 1.0)) - np.log(np.maximum(i, 1.0))
    steps[:, 0] = 0.0
    log_c = np.cumsum(steps, axis=1)
    # C(alpha, i) > 0 for i <= floor(alpha) + 1, then the signs alternate
    flip = np.maximum(i - np.floor(al) - 1.0, 0.0)
    # (flip holds non-negative integers: its parity by a bit test, the values np.mod(flip, 2) gave)
    sign = 1.0 - 2.0 * np.bitwise_and(flip.astype(np.int64), 1)
    out = _SeriesOrders(
        j=j,
        log_c=log_c,
        sign=sign,
        c_err=4.0 * i * (np.abs(log_c) + 1.0),
        jj_less_j=j * j - j,
        jj_plus_abs_j=j * j + np.abs(j),
        abs_j=np.abs(j),
    )
    for table in vars(out).values():
        table.setflags(write=False)
    return out


def mtz_log_a(
    lq: Vector, l1q: Vector, sigma: Vector, orders: IntVector, work: Work
) -> tuple[Vector, Mask, Vector]:
    """Upper bounds on log A at the fractional grid orders ``orders`` (indices into ``ORDERS``,
    alpha < 11; the parts that depend on the order alone from ``_series_orders``) by the signed
    series of MTZ19 case II: the terms i < ``SERIES_HEAD`` summed, the alternating rest bounded
    by Euler's transform (module docstring); +inf where cancellation leaves no usable bound.
    Also whether each bound is tight to 1e-12 of A - 1, and how far below it log A can be (the
    rounding slack and Euler's bracket: A is summed from terms near 1, so where A - 1 is tiny
    this width is many times A - 1, and the bound moves by up to it with the last bits of the
    CPU's exp and log).

    For i > alpha, a_i = |C(alpha, i)| (X_i + Y_i) is a Hausdorff moment sequence in i
    (|C(alpha, i)| = Gamma(i - alpha) / (|Gamma(-alpha)| Gamma(i + 1)) is a Beta integral, X_i and
    Y_i are expectations of r^i and (1/r)^{i - alpha} with r, 1/r < 1 on their half-lines; products
    and sums of moment sequences are moment sequences). So with b_k = (-1)^k Delta^k a_N =
    int t^N (1 - t)^k dnu >= 0, non-increasing in k, sum_m (-1)^m a_{N+m} = sum_k b_k / 2^{k+1}
    (integrate 1 / (1 + t) = sum_k (1 - t)^k / 2^{k+1}), which lies in [L, L + b_K / 2^K] with L
    the first K terms. The differences are taken from the computed terms; their rounding adds at
    most (K + 2) a_N times the terms' relative error.
    """
    n = orders.size
    table = _series_orders()
    a = (0.5 / (sigma * sigma))[:, None]
    z0 = (sigma * sigma * (l1q - lq) + 0.5)[:, None]
    sg, q1, q2 = sigma[:, None], lq[:, None], l1q[:, None]
    i = np.arange(SERIES_TERMS, dtype=np.float64)[None, :]
    j, log_c, sign = table.j[orders], table.log_c[orders], table.sign[orders]
    x1, x2 = (z0 - i) / sg, (j - z0) / sg
    n1, n2 = special.log_ndtr(x1), special.log_ndtr(x2)
    iq1, jq2, jq1, iq2 = i * q1, j * q2, j * q1, i * q2
    t1 = iq1 + jq2 + a * (i * i - i) + n1
    t2 = jq1 + iq2 + a * table.jj_less_j[orders] + n2
    log_term = log_c + np.logaddexp(t1, t2)
    work.terms += log_term.size
    # a term's rounding, relatively: an ulp of the recurrence's running value per step, a few
    # ulps of the magnitude of every part of t1 and t2 (not of t1 or t2 themselves: at q = 1e-8,
    # sigma = 0.5, order 10.2, alpha log q = -186 and a (alpha^2 - alpha) = 184 cancel in t2 to
    # -2.2, and bounding by ulps of 2.2 left the curve 1.6e-14 below the 60-digit value), and
    # log_ndtr's slope times its argument's error (z0, the shift and the division); then the
    # log of the term relative to the scale below
    arg_err = (
        sg * sg * (np.abs(q1) + np.abs(q2)) + 1.0 + np.abs(z0) + i + table.abs_j[orders]
    ) / sg
    mag1 = (
        np.abs(iq1)
        + np.abs(jq2)
        + a * (i * i + i)
        + np.abs(n1)
        + _log_ndtr_slope(x1) * (arg_err + np.abs(x1))
    )
    mag2 = (
        np.abs(jq1)
        + np.abs(iq2)
        + a * table.jj_plus_abs_j[orders]
        + np.abs(n2)
        + _log_ndtr_slope(x2) * (arg_err + np.abs(x2))
    )
    w2 = special.expit(t2 - t1)  # the share of the second half in the term
    # (log |C(alpha, 0)| = 0 exactly; each recurrence step adds two logs and a sum)
    # scaled to the largest term, which is among the first ones (a_i decreases for i > alpha)
    # unless A is near 1, where the scale 1 keeps A - 1 = (hi - 1) + lo free of cancellation
    scale = np.max(log_term[:, :16], axis=1)
    scale = np.where(np.abs(scale) < 1.0, 0.0, scale)
    err = U * (
        table.c_err[orders]
        + 8.0 * ((1.0 - w2) * mag1 + w2 * mag2)
        + 4.0 * np.abs(log_term - scale[:, None])
        + 8.0
    )
    rel = np.exp(log_term - scale[:, None])
    head, tail = SERIES_HEAD, SERIES_TERMS - SERIES_HEAD - 1
    hi, lo = _sum2(sign[:, :head] * rel[:, :head])
    absolute = _tree_sum(rel[:, :head])
    errors = _tree_sum(rel[:, :head] * err[:, :head])
    # Euler's transform of the alternating rest, sum_{i >= N} sign_i a_i
    d = rel[:, head:]
    euler = np.zeros(n)
    for k in range(tail):
        euler += d[:, 0] / 2.0 ** (k + 1)
        d = d[:, :-1] - d[:, 1:]
    euler_tail = np.maximum(d[:, 0], 0.0) / 2.0**tail
    a_n = rel[:, head]
    euler_err = (tail + 2.0) * a_n * (np.max(err[:, head:], axis=1) + tail * U) * 2.0
    rest = np.where(sign[:, head] > 0, euler + euler_tail, -euler) + euler_err
    slack = errors * 1.01 + (head * U) ** 2 * 4.0 * absolute + euler_err
    # log of hi + lo + rest + slack; relative to 1 when the scale is 1 (no cancellation in A - 1:
    # hi - 1 is exact there, Sterbenz)
    with np.errstate(divide="ignore", invalid="ignore"):
        near_one = scale == 0.0
        am1 = ((hi - 1.0) + (lo + rest + slack)) * (1.0 + 4.0 * U)
        upper = (hi + (lo + rest + slack)) * (1.0 + 4.0 * U)
        log_a = np.where(
            near_one,
            np.where(am1 > -1.0, np.log1p(np.maximum(am1, -1.0)), -np.inf),
            scale + np.log(upper),
        )
        # how far below the bound A can be: the slack and the Euler bracket's width
        width = slack + euler_tail + 8.0 * U * np.abs(hi)
        tight = np.where(near_one, width <= 1e-12 * am1, width <= 1e-12 * upper)
        # the same width in log A (``rdp_batch``'s spread)
        log_width = np.where(near_one, width / np.maximum(1.0 + am1, U), width / upper)
        return np.where(upper > 0, log_a, np.inf), tight & (upper > 0), log_width
