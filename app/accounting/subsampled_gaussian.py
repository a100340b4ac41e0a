"""RDP of the Poisson-subsampled Gaussian mechanism (DP-SGD), with bounded work and sound rounding.

Setting (docs/formulas.md §1.8): each record is included independently with probability q, the
contributions are clipped, N(0, sigma^2) noise is added (sigma = noise multiplier); neighbours
add or remove one record. The worst pair is one-dimensional: mu0 = N(0, sigma^2),
mu = (1 - q) mu0 + q N(1, sigma^2), and eps(alpha) = log(A_alpha) / (alpha - 1) with
A_alpha = E_{mu0}[(1 - q + q L)^alpha], L = mu1 / mu0 [MTZ19 section 3]. Every value returned is
an upper bound on eps(alpha); work per curve is bounded (counted in ``Work``).

Integer orders [MTZ19 section 3.3 case I]: A - 1 = sum_{i>=2} w_i expm1(a (i^2 - i)) with
w_i = C(alpha, i) q^i (1 - q)^{alpha - i} and a = 1 / (2 sigma^2), all terms positive. The log
of a term, f(i) = log w_i + a (i^2 - i), has f'' = 2a - psi'(i + 1) - psi'(alpha - i + 1) (log
C(alpha, i) is concave, a i^2 convex), so the ratio lambda(i) = f(i + 1) - f(i) =
log((alpha - i) / (i + 1)) + log(q / (1 - q)) + 2 a i is decreasing, increasing, decreasing on
[0, x1], [x1, x2], [x2, alpha], with x1, x2 the roots of (alpha - x)(x + 1) = (alpha + 1) sigma^2.
On a piece where lambda decreases the terms are unimodal, where it increases they are
quasi-convex (largest at the ends). Each piece is summed exactly on windows around its peak
(or from its ends) until the terms drop by ``DROP`` nats, and the terms left out are bounded by
their count times the largest of them, which monotonicity puts next to the window. A few terms
around x1 and x2 are summed exactly. So the sum is exact up to alpha e^-DROP (< 1e-14) of the
largest e^{f(i)}, i >= 0, its work is O(window) per order instead of O(alpha) (about
``WINDOW_BUDGET`` terms per curve at most), and no term is ever dropped unbounded. That is
relative to A, not to A - 1: where A - 1 is tiny (small q, large sigma) every term that matters
may lie DROP below the i = 0 term and be bounded, not summed. A left-out term w_i expm1(a (i^2 -
i)) is bounded by e^{f(i)} min(1, a (top^2 - top)), top the largest index left out (expm1(x) <=
min(1, x) e^x): without that factor the order-2 value at q = 1e-10, sigma = 30 was 900 times the
exact A - 1, now 1 + 6e-4 times. Still loose there by the count of left-out terms and the spread
of a (i^2 - i) over them: +1.9 % at q = 1e-9, sigma = 30 (order 256), +25 % at q = 1e-11 and
+1,120 % at q = 1e-12 (order 20) after the other bounds have capped it (an audit at stop 25).

Fractional orders (all below 11) take the least of four upper bounds:

* the signed series of MTZ19 case II (split at z0 = sigma^2 log(1/q - 1) + 1/2), **signs kept**
  (dp_accounting 0.6.0 sums absolute values). For i > alpha the coefficients C(alpha, i)
  alternate in sign and a_i = |C(alpha, i)| (X_i + Y_i) is a Hausdorff moment sequence, so the
  alternating rest after ``SERIES_HEAD`` terms is bounded above and below by Euler's transform
  of the next terms (``_mtz_log_a``); the head is summed without cancellation (TwoSum
  cascade, A - 1 taken as (hi - 1) + lo), and every term's rounding is bounded. Fixed work:
  ``SERIES_TERMS`` terms per order.
* the Taylor series of (1 + x)^alpha in x = q (L - 1) >= -q: A = sum_{k<K} C(alpha, k) q^k M_k
  + E[R_K], M_k = E[(L - 1)^k], with Lagrange's remainder R_K = C(alpha, K) x^K (1 + xi)^{alpha - K}
  of the sign of C(alpha, K) for even K > alpha, and at most C(alpha, K) q^K (1 - q)^{alpha - K}
  M_K when positive. M_k = Delta^k f(0) for f(j) = E[L^j] = e^{a j (j - 1)} is a power series in
  a with non-negative coefficients (the falling-factorial expansion of (j (j - 1))^n), bounded
  above and below; every even K gives a bound and the least is taken. Tight where sigma is
  large (A - 1 tiny); used where q e^{8a} < 1, and where it is tight to 1e-12 the series above
  is skipped.
* the chord of the convex (alpha - 1) eps(alpha) [docs/formulas.md §0.1, 2.5; WBK19 Cor 10] between
  the neighbouring integer orders (alpha = 1 contributes 0);
* the Gaussian without subsampling, alpha / (2 sigma^2) (joint convexity).

Last, eps(alpha) <= eps(beta) for beta >= alpha (RDP is non-decreasing in the order), so each
order takes the least bound found at it or above it. No fallback value is ever carried to
higher orders (the running maximum used before copied a fallback at order 2 onto 1.1 .. 1.9,
6-21 % looser than dp_accounting at q = 0.5).

Measured looser than the above says (sound, above the mpmath value; an audit at stop 40):
integer orders from about 38,000 up carry up to 2.3e-9 more than the alpha e^-DROP window bound
(the bounded tails of two pieces add up there); at fractional orders the rounding bound on the
series head has an absolute floor of about 8.6e-16 on A, which is about 1e-5 of eps, relative,
where A - 1 is itself tiny (q = 1.5e-5, sigma = 0.49, alpha = 1.01: +1.3e-5 against mpmath's
quadrature) and up to a few 1e-6 at q near 1 with a huge sigma.

Edge cases: q = 0 gives 0 (the kind refuses it); q = 1 is the Gaussian mechanism, handled by
the kind. A value that would underflow to 0 while q > 0 is returned as the least positive float.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
import numpy.typing as npt
from scipy import special

from app.accounting.orders import INTEGER_MASK, ORDERS

Vector = npt.NDArray[np.float64]
IntVector = npt.NDArray[np.int64]
Mask = npt.NDArray[np.bool_]

U = 2.0**-53
"""Unit roundoff of float64."""

DROP = 45.0
"""A window of an integer-order sum ends where its terms are e^-DROP of its peak (or larger)."""

MAX_WINDOW = 4096
"""At most this many terms on each side of a peak (the rest is bounded, soundly, not summed)."""

WINDOW_BUDGET = 100_000
"""Exact terms per curve for the integer orders (about); wider windows are narrowed until they
fit, what they leave out bounded instead of summed."""

SERIES_HEAD = 12
SERIES_TERMS = 32
"""Signed-series terms per fractional order: ``SERIES_HEAD`` summed, the next ones bound the
alternating rest by Euler's transform (to about 2^-39 of the first term left out)."""

TAYLOR_K = 32
"""Largest truncation order of the Taylor bound."""

TINY = float(np.nextafter(0.0, 1.0))


@dataclass
class Work:
    """What computing a batch of curves cost: series and sum terms evaluated, point
    evaluations of the term function (bisections, window edges)."""

    terms: int = 0
    evaluations: int = 0


@lru_cache(maxsize=1)
def _log_factorials() -> Vector:
    """log n! for n = 0 .. the largest integer order (computed once)."""
    n = int(ORDERS[INTEGER_MASK].max())
    out: Vector = special.gammaln(np.arange(n + 1, dtype=np.float64) + 1.0)
    out.setflags(write=False)
    return out


LOG_EXPM1_EXACT = 40.0
"""For x >= this, x + log1p(-e^-x) rounds to x itself: |log1p(-e^-x)| < 5e-18, below half the
spacing of floats near x (>= 2^-48 from 32 on)."""


@lru_cache(maxsize=1)
def _log_integers() -> Vector:
    """log n for n = 0 .. the largest integer order + 1 (-inf at 0; computed once): the values
    np.log gives for each, looked up instead of evaluated in the bisections."""
    n = int(ORDERS[INTEGER_MASK].max()) + 1
    with np.errstate(divide="ignore"):
        out: Vector = np.log(np.arange(n + 1, dtype=np.float64))
    out.setflags(write=False)
    return out


def _log_expm1(x: Vector) -> Vector:
    """log(e^x - 1) for x >= 0 (-inf at 0), without overflow or cancellation. For
    30 < x < ``LOG_EXPM1_EXACT``: x + log1p(-e^-x); above, that expression's value x itself
    (not evaluated: the same numbers)."""
    out = x.copy()
    small = np.flatnonzero(x <= 30.0)  # (about half of the integer orders' terms)
    with np.errstate(divide="ignore"):
        out[small] = np.log(np.expm1(x[small]))
    mid = np.flatnonzero((x > 30.0) & (x < LOG_EXPM1_EXACT))
    if mid.size:
        xm = x[mid]
        out[mid] = xm + np.log1p(-np.exp(-xm))
    return out


# --- integer orders ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Rows:
    """Per-(curve, order) parameters of the integer-order sums, flattened."""

    lq: Vector  # log q
    l1q: Vector  # log(1 - q)
    a: Vector  # 1 / (2 sigma^2)
    alpha: IntVector
    group: IntVector | None = None  # the chunk of GROUP curves of each row (bisections)
    # derived once per row, for the many evaluations of the bisections (the values the
    # expressions below computed at every evaluation): log alpha!, alpha - 1, log q - log(1 - q)
    # and 2 a
    lf_alpha: Vector = field(init=False, repr=False)
    alpha_less_1: IntVector = field(init=False, repr=False)
    lq_less_l1q: Vector = field(init=False, repr=False)
    two_a: Vector = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "lf_alpha", _log_factorials()[self.alpha])
        object.__setattr__(self, "alpha_less_1", self.alpha - 1)
        object.__setattr__(self, "lq_less_l1q", self.lq - self.l1q)
        object.__setattr__(self, "two_a", 2.0 * self.a)

    def take(self, sel: IntVector) -> _Rows:
        """The rows ``sel`` (gathered once, for the many evaluations of a bisection)."""
        group = None if self.group is None else self.group[sel]
        return _Rows(
            lq=self.lq[sel], l1q=self.l1q[sel], a=self.a[sel], alpha=self.alpha[sel], group=group
        )

    def f(self, i: IntVector, sel: IntVector | slice = slice(None)) -> Vector:
        """log of the term i of A (before the expm1 refinement): log w_i + a (i^2 - i); i is
        clipped to [0, alpha] (bisections evaluate their predicates everywhere, the value only
        matters inside)."""
        lf = _log_factorials()
        al = self.alpha[sel]
        i = np.minimum(np.maximum(i, 0), al)
        ami = al - i
        fi = i.astype(np.float64)
        out: Vector = (
            self.lf_alpha[sel]
            - lf[i]
            - lf[ami]
            + fi * self.lq[sel]
            + ami * self.l1q[sel]
            + self.a[sel] * (fi * fi - fi)
        )
        return out

    def ratio(self, i: IntVector, sel: IntVector | slice = slice(None)) -> Vector:
        """lambda(i) = f(i + 1) - f(i), for 0 <= i < alpha (i clipped to that range)."""
        i = np.minimum(np.maximum(i, 0), self.alpha_less_1[sel])
        log_n = _log_integers()
        out: Vector = (
            log_n[self.alpha[sel] - i] - log_n[i + 1] + self.lq_less_l1q[sel] + self.two_a[sel] * i
        )
        return out


def _first_true(  # type: ignore[no-untyped-def]
    lo: IntVector, hi: IntVector, pred, work: Work, group: IntVector | None = None
) -> IntVector:
    """Smallest i in [lo, hi] with pred(i, sel) true, for a predicate that is monotone (false
    then true) on that range and true at hi (bisection, vectorised); ``pred(i, sel)`` evaluates
    the rows ``sel`` (all of them, slice(None), or an index array).

    The rows of each ``group`` take as many steps as the widest range of their group needs,
    the steps they took when each group of GROUP curves was a chunk of its own: the same probes,
    so the same results and the same evaluations counted (a row whose range has shrunk to one
    index keeps it, however many more steps it takes)."""
    span = np.maximum(hi - lo, 0)
    if group is None:
        group = np.zeros(span.size, dtype=np.int64)
    widest = np.zeros(int(group.max(initial=-1)) + 1, dtype=np.int64)
    np.maximum.at(widest, group, span)
    steps = np.array([int(w).bit_length() for w in widest], dtype=np.int64)[group]
    every, most = int(steps.min(initial=0)), int(steps.max(initial=0))
    lo, hi = lo.copy(), hi.copy()
    for t in range(most):
        if t < every:  # every row still searching
            mid = (lo + hi) // 2
            work.evaluations += lo.size
            ok = pred(mid, slice(None))
            hi = np.where(ok, mid, hi)
            lo = np.where(ok, lo, mid + 1)
        else:
            sel: IntVector | slice = np.flatnonzero(steps > t)
            assert isinstance(sel, np.ndarray)
            if sel.size and sel[-1] - sel[0] + 1 == sel.size:  # one run of rows: a view
                sel = slice(int(sel[0]), int(sel[-1]) + 1)
            lo_s, hi_s = lo[sel], hi[sel]
            mid = (lo_s + hi_s) // 2
            work.evaluations += mid.size
            ok = pred(mid, sel)
            hi[sel] = np.where(ok, mid, hi_s)
            lo[sel] = np.where(ok, lo_s, mid + 1)
    return hi


def _pieces(rows: _Rows) -> list[tuple[str, IntVector, IntVector]]:
    """The five pieces (kind, first, last) of each row's index range [0, alpha]: unimodal,
    exact gap, quasi-convex, exact gap, unimodal (empty when first > last). Two integers of
    slack on each side of x1 and x2 keep the monotonicity claims safe from their rounding."""
    al = rows.alpha.astype(np.float64)
    sig2 = 0.5 / rows.a
    disc = ((al + 1.0) / 2.0) ** 2 - (al + 1.0) * sig2
    root = np.sqrt(np.maximum(disc, 0.0))
    has = disc > 0
    x1 = np.where(has, (al - 1.0) / 2.0 - root, al + 10.0)
    x2 = np.where(has, (al - 1.0) / 2.0 + root, al + 10.0)
    n = rows.alpha
    zero = np.zeros_like(n)
    t1 = np.clip(np.floor(x1).astype(np.int64) - 3, -1, n)
    s2 = np.clip(np.ceil(x1).astype(np.int64) + 2, 0, n + 1)
    t2 = np.clip(np.floor(x2).astype(np.int64) - 3, -1, n)
    s3 = np.clip(np.ceil(x2).astype(np.int64) + 2, 0, n + 1)
    single = ~has
    u1_last = np.where(single, n, t1)
    return [
        ("unimodal", zero, u1_last),
        ("exact", np.where(single, n + 1, t1 + 1), np.where(single, n, np.minimum(s2 - 1, n))),
        ("quasi_convex", np.where(single, n + 1, s2), np.where(single, n, t2)),
        ("exact", np.where(single, n + 1, np.maximum(t2 + 1, s2)), np.where(single, n, s3 - 1)),
        ("unimodal", np.where(single, n + 1, s3), np.where(single, n, n)),
    ]


@dataclass
class _Windows:
    """Exact windows [first, last] and bounded remainders log(count) + f(edge), by row."""

    owner: list[IntVector]
    first: list[IntVector]
    last: list[IntVector]
    rem_owner: list[IntVector]
    rem_log: list[Vector]

    def replaced(self, rows: IntVector, n_rows: int, new: _Windows) -> _Windows:
        """These windows with those of ``rows`` replaced by ``new`` (computed for those rows
        alone: its owners index ``rows``). Each row keeps its windows and remainders in the
        order they were made (its sums add them in that order)."""
        gone = np.zeros(n_rows, dtype=bool)
        gone[rows] = True
        kept = [~gone[o] for o in self.owner]
        kept_rem = [~gone[o] for o in self.rem_owner]
        return _Windows(
            owner=[o[k] for o, k in zip(self.owner, kept, strict=True)]
            + [rows[o] for o in new.owner],
            first=[f[k] for f, k in zip(self.first, kept, strict=True)] + new.first,
            last=[x[k] for x, k in zip(self.last, kept, strict=True)] + new.last,
            rem_owner=[o[k] for o, k in zip(self.rem_owner, kept_rem, strict=True)]
            + [rows[o] for o in new.rem_owner],
            rem_log=[x[k] for x, k in zip(self.rem_log, kept_rem, strict=True)] + new.rem_log,
        )

    def window(self, owner: IntVector, first: IntVector, last: IntVector) -> None:
        keep = first <= last
        self.owner.append(owner[keep])
        self.first.append(first[keep])
        self.last.append(last[keep])

    def remainder(
        self, owner: IntVector, count: IntVector, log_edge: Vector, a: Vector, top: IntVector
    ) -> None:
        """``count`` left-out terms of rows ``owner``, indices up to ``top``, each at most
        e^{f(i)} <= e^``log_edge``. The term itself is w_i expm1(a (i^2 - i)), and expm1(x) <=
        min(1, x) e^x for x >= 0, with a (i^2 - i) increasing in i: so each is at most
        e^``log_edge`` min(1, a (top^2 - top)) (rounded up). Without that factor a bounded term
        could stand for 1 / (a (i^2 - i)) times itself: 900 times the exact A - 1 at q = 1e-10,
        sigma = 30, order 2."""
        t = top.astype(np.float64)
        with np.errstate(divide="ignore"):
            share = np.log(np.minimum(1.0, a * (t * t - t) * (1.0 + 8.0 * U)))
        log_edge = log_edge + share
        keep = (count > 0) & (share > -np.inf)
        self.rem_owner.append(owner[keep])
        with np.errstate(divide="ignore"):
            self.rem_log.append(np.log(count[keep].astype(np.float64)) + log_edge[keep])


def _unimodal(
    rows: _Rows,
    ids: IntVector,
    s: IntVector,
    e: IntVector,
    out: _Windows,
    work: Work,
    width: IntVector,
) -> None:
    keep = np.flatnonzero(s <= e)
    if keep.size == 0:
        return
    idx, s, e = ids[keep], s[keep], e[keep]
    sub = rows.take(idx)  # (_first_true evaluates every row: its predicates take all of sub)
    # peak: first i with lambda(i) <= 0 (lambda decreases on the piece), else the last index
    g = sub.group
    peak = _first_true(s, e, lambda i, k: (i >= e[k]) | (sub.ratio(i, k) <= 0.0), work, g)
    top = sub.f(peak)
    work.evaluations += idx.size
    # f increases up to the peak and decreases after it: bisect for the drop on each side
    lo = np.maximum(s, peak - width[idx])
    drop = top - DROP
    first = _first_true(lo, peak, lambda i, k: sub.f(i, k) >= drop[k], work, g)
    hi = np.minimum(e, peak + width[idx])
    # largest i in [peak, hi] with f(i) >= top - DROP = (first j with f(j + 1) < top - DROP)
    last = _first_true(peak, hi, lambda i, k: (i >= hi[k]) | (sub.f(i + 1, k) < drop[k]), work, g)
    out.window(idx, first, last)
    work.evaluations += 2 * idx.size
    left = first - s
    out.remainder(idx, left, sub.f(np.maximum(first - 1, 0)), sub.a, first - 1)
    right = e - last
    out.remainder(idx, right, sub.f(np.minimum(last + 1, sub.alpha)), sub.a, e)


def _quasi_convex(
    rows: _Rows,
    ids: IntVector,
    s: IntVector,
    e: IntVector,
    out: _Windows,
    work: Work,
    width: IntVector,
) -> None:
    keep = np.flatnonzero(s <= e)
    if keep.size == 0:
        return
    idx, s, e = ids[keep], s[keep], e[keep]
    sub = rows.take(idx)
    # valley: first i with lambda(i) > 0 (lambda increases on the piece), else the last index
    g = sub.group
    valley = _first_true(s, e, lambda i, k: (i >= e[k]) | (sub.ratio(i, k) > 0.0), work, g)
    f_s, f_e = sub.f(s), sub.f(e)
    work.evaluations += 2 * idx.size
    hi = np.minimum(valley, s + width[idx])
    # f decreases on [s, valley]: the left window ends at the last i with f(i) >= f(s) - DROP
    drop_s, drop_e = f_s - DROP, f_e - DROP
    left_last = _first_true(
        s, hi, lambda i, k: (i >= hi[k]) | (sub.f(i + 1, k) < drop_s[k]), work, g
    )
    lo = np.maximum(valley, e - width[idx])
    # f increases on [valley, e]: the right window starts at the first i with f(i) >= f(e) - DROP
    right_first = _first_true(lo, e, lambda i, k: sub.f(i, k) >= drop_e[k], work, g)
    merged = left_last + 1 >= right_first
    out.window(idx[merged], s[merged], e[merged])
    sep = ~merged
    out.window(idx[sep], s[sep], left_last[sep])
    out.window(idx[sep], right_first[sep], e[sep])
    inner_first, inner_last = left_last[sep] + 1, right_first[sep] - 1
    work.evaluations += 2 * int(sep.sum())
    edge = np.maximum(rows.f(inner_first, idx[sep]), rows.f(inner_last, idx[sep]))
    out.remainder(idx[sep], inner_last - inner_first + 1, edge, rows.a[idx[sep]], inner_last)


def _windows(rows: _Rows, work: Work, width: IntVector) -> _Windows:
    """The exact windows and bounded remainders of every row, windows at most ``width`` (per
    row) terms on each side of a peak or end."""
    out = _Windows([], [], [], [], [])
    ids = np.arange(rows.alpha.size)
    pieces = _pieces(rows)
    unimodal = [(first, last) for kind, first, last in pieces if kind == "unimodal"]
    # (rows group by group, so that a group's rows are one run for the bisections; each row's
    # pieces stay in their order)
    u_ids = np.concatenate([ids] * len(unimodal))
    by_group = np.argsort(rows.group[u_ids], kind="stable") if rows.group is not None else None
    u_first = np.concatenate([f for f, _ in unimodal])
    u_last = np.concatenate([last for _, last in unimodal])
    if by_group is not None:
        u_ids, u_first, u_last = u_ids[by_group], u_first[by_group], u_last[by_group]
    _unimodal(rows, u_ids, u_first, u_last, out, work, width)
    for kind, first, last in pieces:
        if kind == "quasi_convex":
            _quasi_convex(rows, ids, first, last, out, work, width)
        elif kind == "exact":
            keep = np.flatnonzero(first <= last)
            out.window(keep, first[keep], last[keep])
    return out


def _terms_by_curve(out: _Windows, curve: IntVector, curves: int) -> IntVector:
    owner = np.concatenate(out.owner)
    size = np.maximum(np.concatenate(out.last) - np.maximum(np.concatenate(out.first), 2) + 1, 0)
    counts: IntVector = np.bincount(curve[owner], weights=size, minlength=curves).astype(np.int64)
    return counts


BLOCK = 12_288
"""Elements of the large temporaries computed at once (the exact terms of the integer orders, the
Taylor bound's (curve, order, k) arrays, the signed series' (row, term) arrays): 96 kB of
float64, under glibc's default mmap threshold (128 kB), so that the many temporaries reuse heap
memory instead of each faulting in fresh pages (which took about half the time of a chunk of 16
curves). Every block's values are those the whole chunk at once gave: each window, curve and
row is computed on its own."""


def _blocks(rows: int, per_row: int) -> Iterator[slice]:
    """Consecutive slices of ``rows`` rows whose temporaries of ``per_row`` elements a row hold
    about ``BLOCK`` elements (at least one row each)."""
    step = max(1, BLOCK // per_row)
    return (slice(j, j + step) for j in range(0, rows, step))


def _window_log_sums(rows: _Rows, owner: IntVector, first: IntVector, size: IntVector) -> Vector:
    """log of the sum of the exact terms of each window (row ``owner``, indices ``first`` ..
    ``first + size - 1``, size >= 1), with its rounding margin."""
    # the exact terms of every window, flattened window after window; a window's row parameters
    # repeated over its terms (np.repeat, not a gather per term), the arrays updated in place
    offsets = np.cumsum(size) - size
    i = np.arange(int(size.sum()), dtype=np.int64)
    i -= np.repeat(offsets - first, size)
    lf = _log_factorials()
    al_w = rows.alpha[owner]
    ami = np.repeat(al_w, size)
    ami -= i
    fi = i.astype(np.float64)
    c = fi * fi
    c -= fi
    c *= np.repeat(rows.a[owner], size)
    le = _log_expm1(c)
    # (each table entry and row parameter gathered once, for the terms and their error)
    lf_al, lf_i, lf_ami = np.repeat(lf[al_w], size), lf[i], lf[ami]
    del i
    lq_w, l1q_w = rows.lq[owner], rows.l1q[owner]
    # log_terms = lf_al - lf_i - lf_ami + fi lq + (alpha - i) l1q + le, left to right
    log_terms = lf_al - lf_i
    log_terms -= lf_ami
    tmp = fi * np.repeat(lq_w, size)
    log_terms += tmp
    ami_f = ami.astype(np.float64)
    del ami
    tmp2 = ami_f * np.repeat(l1q_w, size)
    log_terms += tmp2
    log_terms += le
    # rounding: each term's log errs by a few ulps of the magnitudes that make it up:
    # U (16 (lf_al + lf_i + lf_ami) + 4 (fi |lq| + (alpha - i) |l1q|) + 4 (c + |le|) + 16)
    err = lf_al
    err += lf_i
    err += lf_ami
    err *= 16.0
    del lf_i, lf_ami
    np.multiply(fi, np.repeat(np.abs(lq_w), size), out=tmp)
    np.multiply(ami_f, np.repeat(np.abs(l1q_w), size), out=tmp2)
    tmp += tmp2
    tmp *= 4.0
    err += tmp
    np.abs(le, out=tmp)
    np.add(c, tmp, out=tmp)
    tmp *= 4.0
    err += tmp
    err += 16.0
    err *= U
    del tmp2, c, le, fi, ami_f
    # per window: log sum exp and the largest error (contiguous segments)
    win_max = np.maximum.reduceat(log_terms, offsets)
    shift = np.where(np.isfinite(win_max), win_max, 0.0)
    np.subtract(log_terms, np.repeat(shift, size), out=tmp)
    np.exp(tmp, out=tmp)
    with np.errstate(divide="ignore"):
        win_log: Vector = shift + np.log(np.add.reduceat(tmp, offsets))
    win_log += np.maximum.reduceat(err, offsets) + np.log1p((size + 4) * 2.0 * U)
    return win_log


def _integer_log_am1(rows: _Rows, curve: IntVector, work: Work) -> Vector:
    """Upper bounds on log(A - 1) for the integer-order rows (``curve``: which curve each row
    belongs to), summing at most about ``WINDOW_BUDGET`` terms per curve: windows are found
    first (bisections only) and a curve's windows are narrowed until they fit; what a narrower
    window leaves out is bounded instead of summed, so the result stays sound, and each curve's
    values do not depend on the others computed with it."""
    curves = int(curve.max()) + 1
    width = np.full(curve.size, MAX_WINDOW, dtype=np.int64)
    out = _windows(rows, work, width)
    while True:
        over = (_terms_by_curve(out, curve, curves) > WINDOW_BUDGET) & (
            np.bincount(curve, weights=width, minlength=curves)
            > 16 * np.bincount(curve, minlength=curves)
        )
        if not over.any():
            break
        width = np.where(over[curve], np.maximum(16, width // 4), width)
        # the windows again for the rows of every group with a curve over the budget: each
        # group's windows are its own, the others' stay (as when each group was a chunk)
        group = np.zeros(curve.size, dtype=np.int64) if rows.group is None else rows.group
        redo_group = np.zeros(int(group.max()) + 1, dtype=bool)
        redo_group[group[over[curve]]] = True
        redo = np.flatnonzero(redo_group[group])
        out = out.replaced(redo, curve.size, _windows(rows.take(redo), work, width[redo]))
    owner = np.concatenate(out.owner)
    first = np.maximum(np.concatenate(out.first), 2)  # A - 1 starts at i = 2
    last = np.concatenate(out.last)
    keep = last >= first
    owner, first, last = owner[keep], first[keep], last[keep]
    size = last - first + 1
    work.terms += int(size.sum())
    # per window: log sum exp of its exact terms, windows summed in blocks of about BLOCK
    # terms (each window's value does not depend on the others summed with it)
    ends = np.cumsum(size)
    win_parts = []
    start = 0
    while start < size.size:
        stop = max(
            int(np.searchsorted(ends, ends[start] - size[start] + BLOCK, "right")), start + 1
        )
        win_parts.append(
            _window_log_sums(rows, owner[start:stop], first[start:stop], size[start:stop])
        )
        start = stop
    win_log = np.concatenate(win_parts) if win_parts else np.zeros(0)
    rem_owner = np.concatenate(out.rem_owner) if out.rem_owner else np.zeros(0, np.int64)
    rem_log = np.concatenate(out.rem_log) if out.rem_log else np.zeros(0)
    if rem_owner.size:
        lf = _log_factorials()
        ral = rows.alpha[rem_owner]
        rem_log = rem_log + U * (
            48.0 * lf[ral]
            + 4.0 * ral * (np.abs(rows.lq[rem_owner]) + np.abs(rows.l1q[rem_owner]))
            + 4.0 * rows.a[rem_owner] * ral.astype(np.float64) ** 2
            + 16.0
        )
    # per row: log sum exp of its windows and remainders (a few each), with a summation margin
    parts_owner = np.concatenate([owner, rem_owner])
    parts_log = np.concatenate([win_log, rem_log])
    n_rows = rows.alpha.size
    peak = np.full(n_rows, -np.inf)
    np.maximum.at(peak, parts_owner, parts_log)
    shift_r = np.where(np.isfinite(peak), peak, 0.0)
    sums = np.zeros(n_rows)
    with np.errstate(invalid="ignore"):
        np.add.at(sums, parts_owner, np.exp(parts_log - shift_r[parts_owner]))
    counts = np.bincount(parts_owner, minlength=n_rows)
    with np.errstate(divide="ignore"):
        log_sum: Vector = shift_r + np.log(sums) + np.log1p((counts + 4) * 2.0 * U)
    return log_sum


# --- fractional orders: the signed MTZ series ------------------------------------------------


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


def _mtz_log_a(
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


# --- fractional orders: the Taylor bound ------------------------------------------------------


def _moments(a: Vector, work: Work) -> tuple[Vector, Vector]:
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
    """``_moments`` at exactly this float a."""
    k = np.arange(TAYLOR_K + 1, dtype=np.float64)
    rows = a.size
    lo = np.full((rows, k.size), -np.inf)
    hi = np.full((rows, k.size), np.inf)
    lo[:, 0] = hi[:, 0] = 0.0  # M_0 = 1; M_1 = 0 stays -inf
    b_max = a * TAYLOR_K * (TAYLOR_K - 1)
    # (rows in blocks: BLOCK elements of the series' (row, k) arrays, of the direct sums'
    # (row, k, j) arrays; every row's bounds are its own)
    on_series = np.flatnonzero(b_max <= 60.0)
    for block in _blocks(on_series.size, k.size):
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
    for block in _blocks(on_direct.size, k.size**2):
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


def _taylor_log_am1(
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


# --- the curve ---------------------------------------------------------------------------------


def _eps_from_log_am1(log_am1: Vector, alpha: Vector) -> Vector:
    """eps = log1p(A - 1) / (alpha - 1), rounded up, never 0 for a positive A - 1."""
    with np.errstate(over="ignore"):
        value = np.logaddexp(0.0, log_am1) / (alpha - 1.0) * (1.0 + 8.0 * U)
    return np.where(np.isfinite(log_am1) | (log_am1 > 0), np.maximum(value, TINY), value)


CHUNK = 32
"""Curves computed together (a multiple of ``GROUP``; the large temporaries are computed
``BLOCK`` elements at a time)."""

GROUP = 16
"""The bisections of the integer orders take, for the rows of each GROUP curves (as counted
from the first curve of a batch), the steps that their widest range needs: the steps, and the
evaluations counted, of chunks of 16 curves computed one by one (larger chunks share numpy
calls, 10 % less CPU at 32, without one more evaluation)."""


def rdp_batch(
    q: Vector,
    sigma: Vector,
    mask: Mask | None = None,
    work: Work | None = None,
    spread: Vector | None = None,
) -> Vector:
    """One step's RDP of each (q_r, sigma_r) on the grid ``ORDERS`` (rows), at the orders where
    ``mask`` is true (+inf elsewhere, a vacuous but valid bound). 0 < q < 1.

    ``spread``, when given (an array of the result's shape), is filled with how far the value
    at each order may differ on another CPU, in eps: 0 where it is reproducible to rounding,
    the signed series' width where that bound, not tight to 1e-12 (A - 1 tiny: small q, large
    sigma), is the least or within its width of it. Two correct evaluations then differ by at
    most about that much (each is an upper bound within it of the exact value): 2.7e-6 of the
    value at q = 1e-6, sigma = 0.65, order 9.3, where an AVX-512 and an AVX2 machine differed
    by 3e-7 of it."""
    q = np.atleast_1d(np.asarray(q, dtype=np.float64))
    sigma = np.atleast_1d(np.asarray(sigma, dtype=np.float64))
    work = Work() if work is None else work
    mask = np.ones(ORDERS.shape, dtype=bool) if mask is None else np.asarray(mask, dtype=bool)
    # the Taylor bound's moments depend on sigma alone: computed for the whole batch at once
    # (their series is a loop over up to ~200 terms: once, not once per chunk), row by row the
    # values each chunk computed for itself
    useful = _taylor_useful(q, sigma)
    curves = np.flatnonzero(useful) if (~INTEGER_MASK & mask).any() else np.zeros(0, np.int64)
    moments = _moments(0.5 / sigma[curves] ** 2, work)
    cut = np.searchsorted(curves, np.arange(0, q.size + CHUNK, CHUNK))
    parts = [
        _rdp_chunk(
            q[k : k + CHUNK],
            sigma[k : k + CHUNK],
            mask,
            work,
            (moments[0][cut[c] : cut[c + 1]], moments[1][cut[c] : cut[c + 1]]),
            None if spread is None else spread[k : k + CHUNK],
        )
        for c, k in enumerate(range(0, q.size, CHUNK))
    ]
    return np.concatenate(parts) if parts else np.zeros((0, ORDERS.size))


def _taylor_useful(q: Vector, sigma: Vector) -> Mask:
    """Where the Taylor bound can work: q e^{8a} < 1 (module docstring)."""
    useful: Mask = q * np.exp(np.minimum(8.0 * 0.5 / sigma**2, 700.0)) < 1.0
    return useful


def _rdp_chunk(
    q: Vector,
    sigma: Vector,
    mask: Mask,
    work: Work,
    moments: tuple[Vector, Vector],
    spread: Vector | None = None,
) -> Vector:
    """``rdp_batch`` of a few curves; ``moments``: ``_moments`` of those where
    ``_taylor_useful``, in order; ``spread`` (rows as the curves) filled as ``rdp_batch``'s."""
    rows = q.size
    if spread is not None:
        spread[:] = 0.0
    lq = np.log(q)
    l1q = np.log1p(-q)
    out = np.full((rows, ORDERS.size), np.inf)
    gaussian = np.nextafter(
        np.nextafter(ORDERS[None, :] / (2.0 * sigma[:, None] ** 2), np.inf), np.inf
    )
    # integer orders, in one batch of (row, order) pairs
    int_idx = np.flatnonzero(INTEGER_MASK & mask)
    if int_idx.size:
        r_of = np.repeat(np.arange(rows), int_idx.size)
        o_of = np.tile(int_idx, rows)
        pairs = _Rows(
            lq=lq[r_of],
            l1q=l1q[r_of],
            a=0.5 / sigma[r_of] ** 2,
            alpha=ORDERS[o_of].astype(np.int64),
            group=r_of // GROUP,
        )
        log_am1 = _integer_log_am1(pairs, r_of, work)
        out[r_of, o_of] = _eps_from_log_am1(log_am1, ORDERS[o_of])
    frac_idx = np.flatnonzero(~INTEGER_MASK & mask)
    if frac_idx.size:
        r_of = np.repeat(np.arange(rows), frac_idx.size)
        o_of = np.tile(frac_idx, rows)
        al = ORDERS[o_of]
        # the Taylor bound first where it can work (q e^{2 a k} < 1 for its first terms to
        # decrease: small q or large sigma, where A - 1 is tiny and the series below loses
        # digits), the signed series wherever the Taylor bound is not tight to 1e-12
        eps_taylor = np.full(al.shape, np.inf)
        taylor_tight = np.zeros(al.shape, dtype=bool)
        # (for the spread only) the exact value is at least this; the series' width in eps
        exact_low = np.zeros(al.shape if spread is not None else 0)
        mtz_width = np.zeros(al.shape if spread is not None else 0)
        useful = _taylor_useful(q, sigma)
        sel = np.flatnonzero(useful[r_of])
        if sel.size:
            curves = np.flatnonzero(useful)  # (sel: every fractional order of these curves)
            parts = [
                _taylor_log_am1(
                    lq[curves[block]],
                    l1q[curves[block]],
                    frac_idx,
                    (moments[0][block], moments[1][block]),
                )
                for block in _blocks(curves.size, frac_idx.size * (TAYLOR_K + 1))
            ]
            log_am1 = np.concatenate([p[0] for p in parts])
            tight = np.concatenate([p[1] for p in parts])
            taylor_tight[sel] = tight.ravel()
            log_am1 = log_am1.ravel()
            eps_taylor[sel] = np.where(
                np.isfinite(log_am1), _eps_from_log_am1(log_am1, al[sel]), np.inf
            )
            if spread is not None:
                with np.errstate(divide="ignore", invalid="ignore"):
                    log_low = np.concatenate(
                        [
                            np.broadcast_to(sc + np.log(np.maximum(b - g, 0.0)), p[0].shape)
                            for p in parts
                            for sc, b, g in (p[2],)
                        ]
                    ).ravel()
                    log_low = np.where(np.isnan(log_low), -np.inf, log_low)
                exact_low[sel] = np.logaddexp(0.0, log_low) / (al[sel] - 1.0)
        eps_mtz = np.full(al.shape, np.inf)
        rest = np.flatnonzero(~taylor_tight)
        if rest.size:
            series = [
                _mtz_log_a(lq[r], l1q[r], sigma[r], o_of[part], work)
                for block in _blocks(rest.size, SERIES_TERMS)
                for part in (rest[block],)
                for r in (r_of[part],)
            ]
            log_a = np.concatenate([p[0] for p in series])
            eps_mtz[rest] = np.where(
                np.isfinite(log_a), np.maximum(log_a, 0.0) / (al[rest] - 1.0) * (1 + 8 * U), np.inf
            )
            if spread is not None:
                loose = ~np.concatenate([p[1] for p in series])
                log_width = np.concatenate([p[2] for p in series])
                mtz_width[rest] = np.where(loose, log_width / (al[rest] - 1.0), 0.0)
        best = np.minimum(eps_mtz, eps_taylor)
        # the chord of (alpha - 1) eps(alpha) between the neighbouring integer orders
        below, above = np.floor(al), np.ceil(al)
        g_below = np.zeros_like(al)
        has_below = below > 1.0
        pos_b = np.searchsorted(ORDERS, below[has_below])
        g_below[has_below] = (below[has_below] - 1.0) * out[r_of[has_below], pos_b]
        pos_a = np.searchsorted(ORDERS, above)
        g_above = (above - 1.0) * out[r_of, pos_a]
        w = al - below
        with np.errstate(invalid="ignore"):
            chord = ((1.0 - w) * g_below + w * g_above) / (al - 1.0) * (1.0 + 8.0 * U)
        chord = np.where(np.isfinite(chord), chord, np.inf)
        best = np.minimum(best, chord)
        out[r_of, o_of] = best
        if spread is not None:
            # another CPU's series bound is within its width above the exact value, as this
            # one is; the other bounds are stable to rounding. So the least of them lies
            # between min(others, series - width), or the least the exact value can be (the
            # Taylor bound's lower end) if larger, and min(others, series + width)
            others = np.minimum(eps_taylor, chord)
            with np.errstate(invalid="ignore"):
                low = np.maximum(np.minimum(others, eps_mtz - mtz_width), exact_low)
                high = np.minimum(others, eps_mtz + mtz_width)
                moved = np.maximum(best - low, high - best)
            spread[r_of, o_of] = np.where(
                np.isfinite(eps_mtz) & (mtz_width > 0), np.clip(moved, 0.0, mtz_width), 0.0
            )
    out = np.minimum(out, np.where(mask[None, :], gaussian, np.inf))
    # eps is non-decreasing in alpha: a bound at a higher order holds at every lower one
    least = np.minimum.accumulate(out[:, ::-1], axis=1)[:, ::-1]
    if spread is not None:
        _carry_spread(out, least, spread)
    out = least
    # q > 0 gives a positive divergence: never report 0 for it
    return np.where(mask[None, :], np.maximum(out, TINY), np.inf)


def _carry_spread(values: Vector, least: Vector, spread: Vector) -> None:
    """``spread`` (of ``values``) made that of ``least``, the least value at or above each
    order: the value of order k on another CPU is at least values_k - spread_k, so it moves the
    least at order j by at most min(spread_k, least_j - values_k + spread_k) where that is
    positive, for k >= j."""
    m = values.shape[1]
    above = np.triu(np.ones((m, m), dtype=bool))  # [j, k]: k >= j
    for r in range(values.shape[0]):
        if not spread[r].any():
            continue
        with np.errstate(invalid="ignore"):
            reach = least[r][:, None] - values[r][None, :] + spread[r][None, :]
            moved = np.where(above & np.isfinite(reach), np.clip(reach, 0.0, spread[r]), 0.0)
        spread[r] = moved.max(axis=1)


@lru_cache(maxsize=256)
def subsampled_gaussian_rdp(q: float, sigma: float) -> Vector:
    """One step's RDP on the grid ``ORDERS`` (cached per (q, sigma); read-only), 0 < q < 1."""
    out: Vector = rdp_batch(np.array([q]), np.array([sigma]))[0]
    out.setflags(write=False)
    return out


def subsampled_gaussian_rdp_window(q: float, sigma: float, mask: Mask) -> Vector:
    """One step's RDP at the orders where ``mask`` is true and +inf elsewhere (calibration
    searches with a few orders and checks the full grid once at the end)."""
    if q == 1.0:
        return np.where(mask, ORDERS / (2.0 * sigma * sigma), np.inf)
    out: Vector = rdp_batch(np.array([q]), np.array([sigma]), mask)[0]
    return out


def subsampled_gaussian_rdp_at(q: float, sigma: float, alpha: float) -> float:
    """eps(alpha) of one step at a grid order ``alpha`` (an upper bound)."""
    j = int(np.flatnonzero(ORDERS == alpha)[0])
    return float(subsampled_gaussian_rdp(q, sigma)[j])


__all__ = [
    "DROP",
    "SERIES_TERMS",
    "MAX_WINDOW",
    "WINDOW_BUDGET",
    "Work",
    "rdp_batch",
    "subsampled_gaussian_rdp",
    "subsampled_gaussian_rdp_at",
    "subsampled_gaussian_rdp_window",
]
