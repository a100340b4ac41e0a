"""Closed-form RDP curves and tight zCDP values (docs/formulas.md section 1), in stable form.

Every function takes the order vector ``alpha`` (all > 1) and returns eps(alpha) with the
conventions stated in the mechanism docstrings of ``mechanisms.py``. Functions named
``*_rho`` return the tight zCDP parameter rho* = sup_alpha eps(alpha) / alpha.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np
import numpy.typing as npt
from scipy import special

from app.accounting.orders import ORDERS
from app.accounting.rounding import TINY, div_up_array, mul_up

Vector = npt.NDArray[np.float64]

ULP_HALF = 2.0**-53
"""Unit roundoff of float64: a correctly rounded operation errs by at most this, relatively."""


TINY_LOG_T = -700.0
"""``rr_rdp``: below this log T, e^log T is near the subnormal range (e^-708 is the least normal
float) and the curve is taken as T / (a - 1) with an absolute margin."""


EXP_ZERO = -746.0
"""e^x rounds to +0 for every x below this (the least subnormal is e^-744.4)."""


def exp_or_zero(x: Vector) -> Vector:
    """``np.exp(x)`` bit for bit (the same values; 0 where x < ``EXP_ZERO``, where it rounds to
    0), without evaluating it there: numpy's vectorised exp takes a slow path, some 20 times
    slower, for any vector of arguments whose results underflow."""
    x = np.asarray(x, dtype=np.float64)
    out: Vector = np.zeros_like(x)
    np.exp(x, out=out, where=~(x < EXP_ZERO))
    return out


def log_expm1(x: Vector) -> Vector:
    """log(e^x - 1) for x > 0 without overflow or cancellation."""
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(divide="ignore"):
        big = x > 30.0
        small = np.log(np.expm1(np.where(big, 1.0, x)))
        large = x + np.log1p(-np.exp(-np.where(big, x, 30.0)))
    return np.where(big, large, small)


# --- Gaussian (BS16 Lemma 16/17; M17 Table II) -------------------------------------------


def gaussian_rho(sigma: float, sensitivity: float) -> float:
    """rho = Delta^2 / (2 sigma^2), exact zCDP and eps(alpha) = alpha rho (BS16 Prop 6),
    rounded up (``gaussian_rho_up``)."""
    return float(gaussian_rho_up(np.array([sensitivity]), np.array([sigma]))[0])


def gaussian_rho_up(sensitivity: Vector, sigma: Vector) -> Vector:
    """Delta^2 / (2 sigma^2) elementwise, never below the exact value and equal to it where it
    is a float (sigma = 2: 1/8): 0.5 t^2 with t = Delta / sigma rounded up and the square
    rounded up (0.5 (Delta / sigma)^2 to nearest was up to 2 ulps below: sigma = 3). Ratios in
    the kinds' range [1e-12, 1e6] keep every step normal."""
    t = div_up_array(np.asarray(sensitivity, np.float64), np.asarray(sigma, np.float64))
    out: Vector = 0.5 * mul_up(t, t)
    return out


# --- k-ary randomized response (M17 Table II; HM25; docs/formulas.md §1.4-1.5) -----------------


def rr_rdp(alpha: Vector, eps: float | Vector, k: int | Vector = 2) -> Vector:
    """Exact RDP of k-ary randomized response with parameter eps, raised by its rounding bound.

    e^{(a-1) eps(a)} = (e^{a e} + e^{(1-a) e} + k - 2) / (e^e + k - 1). Subtracting the
    denominator, the numerator minus denominator factorises as
    expm1((a-1) e) * expm1(a e) * e^{-(a-1) e}, which has no cancellation, so
    eps(a) = log1p(T) / (a - 1), T = expm1(x) expm1(a e) e^{-x} / (e^e + k - 1), x = (a-1) e.
    log T is a sum of logs, each with an absolute error of a few ulps of its own magnitude, so
    log T errs by E <= 4 u (|log expm1 x| + |log expm1 a e| + x + |log den| + 4), u = 2^-53,
    and log1p(T) = log(1 + e^{log T}) by at most E T / (1 + T), a relative error of at most
    E T / ((1 + T) log1p(T)) <= E: the result is raised by that, plus 4 u for the last steps.

    Where T is below e^``TINY_LOG_T`` (eps < ~1e-154, only ``approx_dp`` takes such epsilons),
    log1p(T) and T / (a - 1) are subnormal or 0 and the relative margin no longer covers their
    rounding: there eps(a) <= T / (a - 1) = e^{log T - log(a - 1)} (log1p(T) <= T), with the
    same margin, plus 2 of the least positive float for the subnormal rounding, so that a
    positive eps never gives a curve of 0.
    """
    a = np.asarray(alpha, dtype=np.float64)
    x = (a - 1.0) * eps
    log_den = np.logaddexp(eps, np.log(np.asarray(k, dtype=np.float64) - 1.0))
    log_x, log_ae = log_expm1(x), log_expm1(a * eps)
    log_t = log_x + log_ae - x - log_den
    log1p_t = np.logaddexp(0.0, log_t)
    with np.errstate(invalid="ignore", divide="ignore"):
        size = np.abs(log_x) + np.abs(log_ae) + x + np.abs(log_den) + 4.0
        damp = np.where(log1p_t > 0, special.expit(log_t) / log1p_t, 1.0)
    error = 4.0 * ULP_HALF * np.where(np.isfinite(size), size, 0.0) * np.minimum(damp, 1.0)
    out: Vector = log1p_t / (a - 1.0) * (1.0 + error + 4.0 * ULP_HALF)
    tiny = log_t < TINY_LOG_T
    if tiny.any():  # (the damping above is 1 there, and expit's subnormal result may be 0)
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):  # rows not taken
            log_a1 = np.log(a - 1.0)
            size = np.where(np.isfinite(size), size, 0.0) + np.abs(log_a1) + 2.0
            bound = np.exp(log_t - log_a1) * (1.0 + 4.0 * ULP_HALF * size) + np.where(
                np.asarray(eps) > 0.0, 2.0 * TINY, 0.0
            )
        out = np.where(tiny, bound, out)
    return out


def rr_kl(eps: float, k: int = 2) -> float:
    """KL limit eps(1) = eps (e^eps - 1) / (e^eps + k - 1) (docs/formulas.md §1.5)."""
    log_num = float(log_expm1(np.array(eps)))
    log_den = float(np.logaddexp(eps, math.log(k - 1)))
    # the exponent errs by a few ulps of its two logs' magnitudes
    margin = 8.0 * ULP_HALF * (abs(log_num) + abs(log_den) + 2.0)
    return eps * math.exp(log_num - log_den) * (1.0 + margin)


def binary_rr_rho(eps: float) -> float:
    """Tight zCDP of any eps-DP mechanism / binary RR: eps tanh(eps/2) (S24 Thm 5; HM25 Prop 8)."""
    return float(binary_rr_rho_array(np.array([eps]))[0])


def binary_rr_rho_array(eps: Vector) -> Vector:
    """``binary_rr_rho`` of each element."""
    e = np.asarray(eps, dtype=np.float64)
    out: Vector = e * np.tanh(e / 2.0) * (1.0 + 8.0 * ULP_HALF)  # three roundings
    # eps below ~1e-154 (approx_dp): eps^2 / 2 is subnormal or 0, its rounding absolute (at most
    # half the least positive float per step): 2 of those keep a positive eps's rho above 0
    return out + np.where(e > 0.0, 2.0 * TINY, 0.0)


# --- Laplace (M17 Prop 6; HM25 main theorem) ----------------------------------------------


LAPLACE_ERROR = 2.0**-42
"""Relative rounding bound of ``laplace_rdp`` (2048 u; its two forms err by at most 55 u and
16.6 u K + 2 u, K <= ``LAPLACE_MAX_CANCEL``, see ``laplace_rdp``): every value is raised by it."""

LAPLACE_SERIES_BELOW = 2.0**-5
"""``laplace_rdp`` takes its series where a eps < this, its closed form elsewhere."""

LAPLACE_SERIES_TERMS = 10
"""Highest power of eps in the series (the terms left out are below 3e-21 of the sum)."""

LAPLACE_MAX_CANCEL = 100.0
"""Largest eps / eps(a) where the closed form is used (a eps >= 2^-5 (1 - u)): about 2 / (a eps)
<= 64 (checked against mpmath on the grid by tests/unit/test_laplace_rdp.py)."""

LAPLACE_ROWS = 128
"""Rows of epsilons evaluated together by ``laplace_rdp`` (their temporaries stay in cache)."""


def _laplace_series_coefficients(a: Vector) -> Vector:
    """c_k(a), k = 2 .. ``LAPLACE_SERIES_TERMS``, rows by k, of S = sum_k c_k eps^k, where
    1 + S = p e^{(a-1) eps} + (1 - p) e^{-a eps}, p = a / (2a - 1): c_k = (p (a-1)^k +
    (1-p) (-a)^k) / k! = a (a-1) / (2a-1) B_k / k!, with B_k = (a-1)^{k-1} + a^{k-1} for even k
    and B_k = -(a^{k-1} - (a-1)^{k-1}) = -sum_{j<k-1} a^j (a-1)^{k-2-j} for odd k (a - (a-1) =
    1): sums of positive terms, so every coefficient is within 24 u of its exact value."""
    a = np.asarray(a, dtype=np.float64)
    am1 = a - 1.0
    head = a * am1 / (2.0 * a - 1.0)
    rows = []
    for k in range(2, LAPLACE_SERIES_TERMS + 1):
        if k % 2 == 0:
            b: Vector = am1 ** (k - 1) + a ** (k - 1)
        else:
            b = np.zeros_like(a)
            for j in range(k - 1):
                b -= a**j * am1 ** (k - 2 - j)
        rows.append(head * b / math.factorial(k))
    out: Vector = np.array(rows)
    return out


def _closed_form_tables(a: Vector) -> tuple[Vector, Vector, Vector]:
    """What the closed form needs of each order: -(2a - 1), q = (a - 1) / (2a - 1), a - 1."""
    two_a_m1 = 2.0 * a - 1.0
    return -two_a_m1, (a - 1.0) / two_a_m1, a - 1.0


@functools.cache
def _grid_tables() -> tuple[Vector, Vector, Vector, Vector]:
    """``_closed_form_tables`` and the series coefficients on ``ORDERS`` (built once)."""
    return *_closed_form_tables(ORDERS), _laplace_series_coefficients(ORDERS)


def _series_below(a: Vector, eps: Vector) -> npt.NDArray[np.bool_]:
    """Where ``laplace_rdp`` takes its series: a < 2^-5 / eps, so that a eps < 2^-5 (1 + u)
    there and >= 2^-5 (1 - u) elsewhere (a and eps broadcast together)."""
    with np.errstate(divide="ignore"):
        below: npt.NDArray[np.bool_] = a < LAPLACE_SERIES_BELOW / eps
    return below


def laplace_rdp(alpha: Vector, eps: float | Vector) -> Vector:
    """Mironov's exact Laplace RDP [M17 Prop 6], eps = Delta / b, raised by ``LAPLACE_ERROR``:

    eps(a) = log(p e^{(a-1) eps} + (1-p) e^{-a eps}) / (a - 1), p = a / (2a - 1). Taking
    e^{(a-1) eps} out of the log, with t = (2a - 1) eps and q = 1 - p = (a-1) / (2a-1):

        eps(a) = eps + L / (a - 1),  L = log1p(q expm1(-t))  (closed form; never overflows).

    Rounding (u = 2^-53; 2a - 1 and a - 1 are exact in floating point): t and q err by u each,
    expm1 by 4 u (numpy's vectorised kernels) plus u from t, q expm1(-t) in (-1/2, 0] by u, and
    log1p, whose condition number there is at most 1.45, by 4 u: L within 15.6 u, L / (a - 1)
    within 16.6 u of itself. |L| / (a - 1) = eps - eps(a) <= eps, so the sum errs by at most
    16.6 u K + u of eps(a), K = eps / eps(a): K is at most ``LAPLACE_MAX_CANCEL`` where
    a eps >= 2^-5 (about 2 / (a eps)), which keeps the error below 1700 u.

    Where a eps < 2^-5 (``LAPLACE_SERIES_BELOW``), eps(a) = log1p(S) / (a - 1) with
    S = sum_{k=2}^{10} c_k eps^k (``_laplace_series_coefficients``) by Horner's rule:
    |c_k| eps^{k-2} <= c_2 4 (a eps)^{k-2} / k!, so the corrections to c_2 = a (a - 1) / 2 add
    up to less than 2 % (no cancellation) and the terms left out to less than 3e-21 of S;
    S is within 24 u (coefficients) + 20 u (Horner) + 2 u, log1p(S) within 50 u, the result
    within 55 u. (The earlier form eps + log1p(...) / (a-1) cancelled to a relative error of
    u / eps: 5.7e-8 at eps = 1e-9.)"""
    a = np.asarray(alpha, dtype=np.float64)
    e = np.asarray(eps, dtype=np.float64)
    if a.ndim == 1 and e.ndim == 2 and e.shape[1] == 1:  # a column of epsilons on a grid
        return _laplace_grid(a, e[:, 0])
    a_b, e_b = np.broadcast_arrays(a, e)
    flat_a, flat_e = a_b.ravel(), e_b.ravel()
    out = np.empty(flat_a.size)
    _laplace_closed_form(flat_e, *_closed_form_tables(flat_a), out)
    small = np.flatnonzero(_series_below(flat_a, flat_e))
    if small.size:
        sa = flat_a[small]
        out[small] = _laplace_series(flat_e[small], _laplace_series_coefficients(sa), sa - 1.0)
    result: Vector = out.reshape(a_b.shape)
    return result


def _laplace_closed_form(e: Vector, neg_t: Vector, q: Vector, am1: Vector, out: Vector) -> None:
    """eps + log1p(q expm1(-t)) / (a - 1), raised, written into ``out`` (``e``, ``neg_t`` =
    -(2a - 1), ``q`` and ``am1`` broadcast together)."""
    t = np.multiply(e, neg_t, out=out)
    np.expm1(t, out=t)
    t *= q
    np.log1p(t, out=t)
    t /= am1
    t += e
    t *= 1.0 + LAPLACE_ERROR


def _laplace_series(
    e: Vector, coef: Vector, am1: Vector, cols: npt.NDArray[np.intp] | None = None
) -> Vector:
    """log1p(sum_k c_k e^k) / (a - 1), raised: ``coef`` rows by k, each broadcast with ``e``,
    or gathered at ``cols`` (one row at a time: no k-by-n table)."""

    def c(k: int) -> Vector:
        row: Vector = coef[k] if cols is None else coef[k][cols]
        return row

    top = coef.shape[0] - 1
    s = c(top) * e
    for k in range(top - 1, 0, -1):
        s += c(k)
        s *= e
    s += c(0)
    s *= e * e
    np.log1p(s, out=s)
    s /= am1
    s *= 1.0 + LAPLACE_ERROR
    out: Vector = s
    return out


LAPLACE_FLAT_T = 40.0
"""Where t = (2a - 1) eps >= this, expm1(-t) is -1 in floating point (e^-40 < 2^-57), so the
closed form is eps + log1p(-q) / (a - 1): a value per order plus eps (``_laplace_flat``)."""


def _flat_is_exact(table: Vector) -> bool:
    """Whether this machine's expm1 gives exactly -1 from t = ``LAPLACE_FLAT_T`` on, and the
    flat part of a row (``table`` = log1p(-q) / (a - 1) on ``ORDERS``) is then what the closed
    form gives, bit for bit (checked once: the grid evaluation takes the flat shortcut only
    then, so the values never depend on it)."""
    t = np.concatenate((np.linspace(LAPLACE_FLAT_T, 800.0, 4001), [1e3, 1e6, 1e300, np.inf]))
    if not bool(np.all(np.expm1(-t) == -1.0)):
        return False
    neg_t, q, am1, _ = _grid_tables()
    eps = np.array([[LAPLACE_FLAT_T], [1e3]])
    closed = np.empty((2, ORDERS.size))
    _laplace_closed_form(eps, neg_t, q, am1, closed)
    flat = np.empty((2, ORDERS.size))
    _laplace_flat(eps, table, flat)
    return bool(np.array_equal(closed, flat))


def _laplace_flat(e: Vector, flat: Vector, out: Vector) -> None:
    """The closed form where expm1(-t) is -1: (log1p(-q) / (a - 1) + eps), raised, the same
    operations on the same values as ``_laplace_closed_form`` (``flat`` = log1p(-q) / (a - 1))."""
    np.add(flat, e, out=out)
    out *= 1.0 + LAPLACE_ERROR


@functools.cache
def _flat_table() -> Vector | None:
    """log1p(-q) / (a - 1) on ``ORDERS``, or None where ``_flat_is_exact`` does not hold."""
    _, q, am1, _ = _grid_tables()
    table: Vector = np.log1p(-q) / am1
    return table if _flat_is_exact(table) else None


def _laplace_grid(a: Vector, eps: Vector) -> Vector:
    """``laplace_rdp`` of every eps (rows) at every order of ``a`` (columns): the closed form
    in row blocks that stay in cache, then the series at the elements a eps < 2^-5 (a prefix
    of each row, the orders being sorted), gathered once for the whole array.

    On ``ORDERS``, a block's columns where every row takes the series are not evaluated by the
    closed form (the series overwrites them), and those where every row has t >= 40 take
    ``_laplace_flat`` (the same values: ``_flat_is_exact``). Rows sorted by eps, as
    ``compose_many`` groups them, leave few columns between: a quarter less work for a ledger's
    Laplace entries, whose two transcendental functions per element are its cost where numpy
    has no SIMD kernel for them (a CPU without AVX-512)."""
    if a is ORDERS:
        neg_t, q, am1, coef = _grid_tables()
        table = _flat_table()
    else:
        neg_t, q, am1 = _closed_form_tables(a)
        coef = _laplace_series_coefficients(a)
        table = None
    n, m = eps.size, a.size
    out: Vector = np.empty((n, m))
    col = eps[:, None]
    counts = None
    if bool(np.all(a[1:] > a[:-1])):  # sorted orders: the series' elements are a row prefix
        with np.errstate(divide="ignore"):
            counts = np.searchsorted(a, LAPLACE_SERIES_BELOW / eps)  # as ``_series_below``
    two_a_less_1 = -neg_t
    for k in range(0, n, LAPLACE_ROWS):
        block = slice(k, k + LAPLACE_ROWS)
        start, stop = 0, m
        if table is not None and counts is not None:
            start = int(counts[block].min())
            # from ``stop`` on, every row of the block has t >= 40 (and one column more: either
            # path gives the same value near the edge, ``_flat_is_exact``)
            least = float(col[block].min())
            edge = (
                m if not least > 0.0 else int(np.searchsorted(two_a_less_1, LAPLACE_FLAT_T / least))
            )
            stop = min(max(start, edge) + 1, m)
            _laplace_flat(col[block], table[stop:], out[block, stop:])
        _laplace_closed_form(
            col[block], neg_t[start:stop], q[start:stop], am1[start:stop], out[block, start:stop]
        )
    if counts is not None:
        rows = np.repeat(np.arange(n), counts)
        cols = np.arange(rows.size) - np.repeat(np.cumsum(counts) - counts, counts)
    else:
        rows, cols = np.nonzero(_series_below(a[None, :], col))
    if rows.size:
        flat = out.reshape(-1)
        flat[rows * m + cols] = _laplace_series(eps[rows], coef, am1[cols], cols)
    return out


def laplace_rho(eps: float) -> float:
    """Tight zCDP of Laplace: eps + e^{-eps} - 1 (HM25), by series below 0.1 (no cancellation)."""
    return float(laplace_rho_array(np.array([eps]))[0])


def laplace_rho_array(eps: Vector) -> Vector:
    """``laplace_rho`` of each element."""
    e = np.asarray(eps, dtype=np.float64)
    # sum_{k>=2} (-eps)^k / k!, alternating with decreasing terms: 20 terms reach 1e-40.
    small = np.minimum(e, 0.1)
    total, term = np.zeros_like(e), -small
    for k in range(2, 22):
        term = term * (-small / k)
        total = total + term
    # rounding: the series has decreasing alternating terms (a few u); above 0.1 the two terms
    # of e + expm1(-e) cancel by at most a factor 21 (e / rho at e = 0.1)
    out: Vector = np.where(
        e < 0.1, total * (1.0 + 16.0 * ULP_HALF), (e + np.expm1(-e)) * (1.0 + 256.0 * ULP_HALF)
    )
    return out


# --- RAPPOR (CH24 Thm 1, Thm 4; docs/formulas.md §1.6) -------------------------------------------


def rappor_rdp(alpha: Vector, eps: float | Vector) -> Vector:
    """One-time RAPPOR with total epsilon eps: twice the binary-RR curve at eps / 2."""
    return 2.0 * rr_rdp(alpha, eps / 2.0, 2)


def rappor_rho(eps: float) -> float:
    """Tight zCDP of RAPPOR (value change): eps tanh(eps / 4), raised by its rounding."""
    return eps * math.tanh(eps / 4.0) * (1.0 + 8.0 * ULP_HALF)


# --- bounded range / exponential mechanism (docs/formulas.md §1.7) --------------------------


def _expm1_minus_x(x: float) -> float:
    """e^x - 1 - x for x > 0 without cancellation (positive Taylor terms below 0.5)."""
    if x >= 0.5:
        return math.expm1(x) - x
    total, term, k = 0.0, x, 1
    while True:
        k += 1
        term *= x / k
        total += term
        if term < total * 1e-18:
            return total


def _x_minus_log1p(u: float) -> float:
    """u - log(1 + u) for -1 < u < 0: sum_{k>=2} |u|^k / k, all terms positive, the tail after
    the last term bounded by |u|^K / (K (1 - |u|)) and added (an upper bound)."""
    a = -u
    if a > 0.5:
        return u - math.log1p(u)
    total, power, k = 0.0, a, 1
    while True:
        k += 1
        power *= a
        total += power / k
        if power < total * 1e-18:
            return total + power * a / ((k + 1) * (1.0 - a))


BR_RHO_TINY = 1e-100
"""Below this eta, ``bounded_range_rho`` answers eta^2 / 8 (its relative excess, eta^2 / 72, is
below 1e-201; the accepted epsilons start at 1e-9)."""


def bounded_range_rho(eta: float) -> float:
    """Tight zCDP of an eta-bounded-range mechanism: c - 1 - log c with c = eta / (e^eta - 1)
    [HM25; docs/formulas.md §1.7], at most eta^2 / 8 [CR21 section 3]. With u = c - 1 =
    -(e^eta - 1 - eta) / (e^eta - 1) in (-1, 0), rho = u - log1p(u), both parts evaluated from
    positive series where the closed form would cancel; a relative margin of 2^-48 covers the
    remaining rounding. Below ``BR_RHO_TINY`` the bound eta^2 / 8 itself, rounded up (the
    series' stopping rule never holds once its terms are subnormal)."""
    if eta <= 0.0:
        return 0.0
    if eta < BR_RHO_TINY:  # rho = eta^2 / 8 (1 - eta^2 / 72 + ...): the first term is above it
        return math.nextafter(math.nextafter(eta * eta / 8.0, math.inf), math.inf)
    if eta > 1.5:  # c < 0.45: no cancellation in c - 1 - log c, log c = log eta - log(e^eta - 1)
        log_c = math.log(eta) - (eta + math.log1p(-math.exp(-eta)))
        value = math.exp(log_c) - 1.0 - log_c
    else:
        value = _x_minus_log1p(-_expm1_minus_x(eta) / math.expm1(eta))
    return min(value * (1.0 + 2.0**-48), eta * eta / 8.0 * (1.0 + 2.0**-50))


def _phi(x: Vector) -> Vector:
    """phi(x) = log(expm1(x) / x) for x > 0 (x + log(-expm1(-x)) - log x from x = 1 on: no
    overflow). phi(x) >= x / 2, since expm1(x) / x = e^{x/2} sinh(x/2) / (x/2)."""
    with np.errstate(divide="ignore", over="ignore"):
        small = np.log(np.expm1(np.minimum(x, 1.0)) / np.minimum(x, 1.0))
        large = x + np.log(-np.expm1(-x)) - np.log(x)
    out: Vector = np.where(x < 1.0, small, large)
    return out


BR_RDP_ERROR = 64.0 * 2.0**-53
"""The absolute error of ``bounded_range_rdp``'s evaluation, in units of the magnitudes summed
(``bounded_range_rdp``'s docstring)."""


def bounded_range_rdp(alpha: Vector, eta: float | Vector) -> Vector:
    """Exact RDP of the eta-bounded-range class (the supremum over every pair whose privacy
    loss lies in an interval [t, t + eta]), raised by a bound on its rounding:

        eps(a) = (a phi(a eta) - phi(eta)) / (a - 1) - phi((a - 1) eta) - eta,
        phi(x) = log(expm1(x) / x).

    Derivation (docs/formulas.md §1.7). At a fixed order a, (a - 1) D_a = log E_Q[Y^a] with
    Y = P/Q in [e^t, e^{t + eta}] and E_Q[Y] = 1; Y^a is convex, so for a given mean the worst
    Y sits on the two ends: Q = (q, 1 - q), e^t = 1 / (1 + q B), and
    (a - 1) D_a = g(q) = log(1 + q A) - a log(1 + q B), A = e^{a eta} - 1, B = e^eta - 1. g
    vanishes at q = 0 and 1 and g'(q) = 0 is linear in q: q* = (A - a B) / ((a - 1) A B),
    where 1 + q* A = (A - B) / ((a - 1) B) and 1 + q* B = a (A - B) / ((a - 1) A); with
    A - B = e^eta (e^{(a-1) eta} - 1), g(q*) / (a - 1) is the formula above. At a -> 1 it is
    c - 1 - log c, c = eta / (e^eta - 1), the KL of [HM25]. It is at most the pure-DP curve at
    eta (eta-BR implies eta-DP) and rho_BR * a; tests: the maximum over the two-point family
    in 50-digit mpmath.

    Rounding: phi(x) errs by at most 6 u + 6 u phi(x) (x rounded, expm1 and log within 4 u, the
    quotient within u; x <= 2 phi(x)), the products, the quotient by a - 1 and the three
    subtractions by a few u of the magnitudes involved; ``BR_RDP_ERROR`` (64 u) times
    (|T1| + |T2| + |T3| + eta + (a + 1) / (a - 1) + 1), T1 = a phi(a eta) / (a - 1),
    T2 = phi(eta) / (a - 1), T3 = phi((a - 1) eta), bounds it with room. The terms cancel where
    eta is small (the value is a eta^2 / 8 to first order, the terms a eta / (a - 1)): the margin
    is then large and the exponential mechanism's other bounds, which are nearly tight there,
    are the least. (``eta`` may be a column, one row per mechanism.)"""
    a = np.asarray(alpha, dtype=np.float64)
    am1 = a - 1.0
    t1 = a * _phi(a * eta) / am1
    t2 = _phi(np.asarray(eta, dtype=np.float64)) / am1
    t3 = _phi(am1 * eta)
    value = ((t1 - t2) - t3) - eta
    margin = BR_RDP_ERROR * (t1 + t2 + t3 + eta + (a + 1.0) / am1 + 1.0)
    with np.errstate(over="ignore", invalid="ignore"):
        out: Vector = np.where(
            np.isfinite(value) & np.isfinite(margin),
            np.maximum(value + margin, 0.0) * (1.0 + 4.0 * 2.0**-53),
            np.inf,
        )
    return out


# --- discrete Laplace (docs/formulas.md §1.3) -----------------------------------------------


def discrete_laplace_rdp(
    alpha: Vector, eps: float | Vector, sensitivity: int | Vector, margin: bool = True
) -> Vector:
    """Exact RDP of the discrete Laplace mechanism, t = eps / Delta, shift by Delta.

    e^{(a-1) eps(a)} = (e^{(a-1) e} + e^{-a e}) / (1 + e^{-t})
                       + tanh(t/2) e^{(a-1) e} s (1 - s^{Delta-1}) / (1 - s),  s = e^{-(2a-1) t}.
    Delta = 1 is binary RR with parameter eps (the loss takes only the values +-eps).
    (a-1) eps(a) = log(e^F + e^S) with F, S the logs of the two parts, each a sum of logs that
    errs by a few ulps of the terms' magnitudes, not of the sum: where t is tiny,
    log tanh(t/2) and -log(1 - s) (-16.8 and +16.1 at t = 1e-7) cancel. The log-sum-exp
    passes on w_F dF + w_S dS (w the parts' shares), so (a-1) eps(a) errs by at most
    8e-16 + 4 u (w_F |F|_terms + w_S |S|_terms), u = 2^-53, |.|_terms the sum of the terms'
    magnitudes; that margin, divided by (a-1), is added so the value stays an upper bound.
    """
    a = np.asarray(alpha, dtype=np.float64)
    if np.ndim(sensitivity) == 0 and sensitivity == 1:
        return rr_rdp(a, eps, 2)
    # (eps and sensitivity may also be columns, one row per mechanism, every sensitivity >= 2)
    t = eps / sensitivity
    x = (a - 1.0) * eps
    log_first = np.logaddexp(x, -a * eps) - np.log1p(np.exp(-t))
    log_s = -(2.0 * a - 1.0) * t
    log_tanh = np.log(np.tanh(t / 2.0))
    log_rest = np.log(-np.expm1((sensitivity - 1) * log_s))
    log_gap = np.log(-np.expm1(log_s))
    log_second = log_tanh + x + log_s + log_rest - log_gap
    value: Vector = np.logaddexp(log_first, log_second) / (a - 1.0)
    if not margin:
        return value
    size_first = np.abs(x) + np.abs(log_first) + t
    size_second = np.abs(log_tanh) + np.abs(x) + np.abs(log_s) + np.abs(log_rest) + np.abs(log_gap)
    w_second: Vector = special.expit(log_second - log_first)
    size = (1.0 - w_second) * size_first + w_second * size_second
    out: Vector = value + (8e-16 + 4.0 * ULP_HALF * size) / (a - 1.0)
    return out


def discrete_laplace_kl(eps: float, sensitivity: int) -> float:
    """KL = eps - t (1 - e^{-eps}) / sinh t, t = eps / Delta (docs/formulas.md §1.3), plus 4
    ulps of eps."""
    t = eps / sensitivity
    ratio = 2.0 * t * math.exp(-t) * (-math.expm1(-eps)) / (-math.expm1(-2.0 * t))
    return max(0.0, eps - ratio) + 4.0 * math.ulp(eps)


# --- numerical supremum of eps(alpha) / alpha ----------------------------------------------

SUP_MARGIN = 1e-9
"""Relative margin added to a numerically located interior supremum (docs/formulas.md §1.5,
item 2)."""


SUP_SCAN = 201
"""Points of ``rho_from_curves``'s log-spaced scan (about 0.25 apart in log(alpha - 1))."""

SUP_STEPS = 64
"""Golden-section steps of ``rho_from_curves`` around the scan's best point: the bracket of
two scan intervals shrinks by 0.618^64 (to about 1e-14 of a unit of log(alpha - 1))."""

_GOLD = (math.sqrt(5.0) - 1.0) / 2.0


def rho_from_curves(
    curve: Callable[[Vector], Vector],
    kl: Vector,
    pure_eps: Vector,
    min_alpha_minus_1: float = 1e-13,
) -> Vector:
    """rho* = sup_{alpha > 1} eps(alpha) / alpha of n closed-form curves at once: ``curve``
    maps an (n, m) array of orders (row r: mechanism r's) to their eps, ``kl`` and
    ``pure_eps`` (n,) are each curve's alpha -> 1 and alpha -> infinity limits.

    Row by row the same steps, all rows in lockstep (so a mechanism's rho does not depend on
    the batch it is computed in): a scan of ``SUP_SCAN`` points over log(alpha - 1) from
    log(min_alpha_minus_1) to log(alpha_max), then ``SUP_STEPS`` golden-section steps on the two
    scan intervals around its best point. If the supremum is the alpha -> 1 limit (the usual
    case, HM25: no value located is above ``kl``), ``kl`` is returned; otherwise the interior
    maximum times (1 + SUP_MARGIN).
    Beyond alpha_max = 1e8 max(1, 1/eps) the bound eps(alpha)/alpha <= pure_eps / alpha_max
    <= eps min(1, eps) / 1e8 is used. Work: n (SUP_SCAN + SUP_STEPS) evaluations of the
    curve, in SUP_STEPS + 3 calls (a 10,000-entry compose of distinct k-ary randomized
    responses took 8.5 s with a scan of 6,001 points and Brent's method per mechanism).

    The scan finds the basin of the global maximum where eps(alpha) / alpha varies on a scale
    of log(alpha - 1) wider than the scan's spacing, as for k-ary randomized response and the
    discrete Laplace mechanism (compared with a 6,001-point scan and Brent's method over their
    parameter ranges in tests/unit/test_rho_sup.py).
    """
    kl = np.asarray(kl, dtype=np.float64)
    pure = np.asarray(pure_eps, dtype=np.float64)
    n = kl.size
    if n == 0:
        return np.zeros(0)

    def f(t: Vector) -> Vector:
        a = 1.0 + np.exp(t)
        with np.errstate(over="ignore", invalid="ignore"):
            value: Vector = np.asarray(curve(a), dtype=np.float64) / a
        return np.where(np.isnan(value), -np.inf, value)

    alpha_max = 1e8 * np.maximum(1.0, 1.0 / np.maximum(pure, 1e-300))
    start = math.log(min_alpha_minus_1)
    span = np.log(alpha_max) - start
    t = start + span[:, None] * np.linspace(0.0, 1.0, SUP_SCAN)[None, :]
    values = f(t)
    i = np.argmax(values, axis=1)
    rows = np.arange(n)
    best = values[rows, i]
    lo = t[rows, np.maximum(i - 1, 0)]
    hi = t[rows, np.minimum(i + 1, SUP_SCAN - 1)]
    # golden-section search for the maximum of f on [lo, hi], every row the same steps
    c = hi - _GOLD * (hi - lo)
    d = lo + _GOLD * (hi - lo)
    fc, fd = f(c[:, None])[:, 0], f(d[:, None])[:, 0]
    for _ in range(SUP_STEPS):
        left = fc >= fd  # the maximum is in [lo, d]
        hi = np.where(left, d, hi)
        lo = np.where(left, lo, c)
        new = np.where(left, hi - _GOLD * (hi - lo), lo + _GOLD * (hi - lo))
        fn = f(new[:, None])[:, 0]
        c, d, fc, fd = (
            np.where(left, new, d),
            np.where(left, c, new),
            np.where(left, fn, fd),
            np.where(left, fc, fn),
        )
        best = np.maximum(best, fn)
    best = np.maximum(best, np.maximum(fc, fd))
    tail = pure / alpha_max
    raised = np.maximum(np.maximum(best, tail), kl) * (1.0 + SUP_MARGIN)
    interior = np.where(raised == 0.0, 0.0, np.nextafter(raised, np.inf))  # ``up``, row by row
    # the KL value only where nothing located is above it: a maximum within 1e-12 of it may be
    # a real interior one (k = 7 just below eps = 0.43675: 1.1e-13 above the limit)
    at_one = (best <= kl) & (tail <= kl)
    out: Vector = np.where(at_one, kl, interior)
    return out


__all__ = [
    "binary_rr_rho",
    "exp_or_zero",
    "binary_rr_rho_array",
    "bounded_range_rdp",
    "bounded_range_rho",
    "discrete_laplace_kl",
    "discrete_laplace_rdp",
    "gaussian_rho",
    "gaussian_rho_up",
    "laplace_rdp",
    "laplace_rho",
    "laplace_rho_array",
    "log_expm1",
    "rappor_rdp",
    "rappor_rho",
    "rho_from_curves",
    "rr_kl",
    "rr_rdp",
]
