"""The subsampled Gaussian's RDP at integer orders: the binomial sum on windows around its peaks,
the terms left out bounded.

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
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from app.accounting.subsampled_gaussian.numerics import (
    BLOCK,
    IntVector,
    U,
    Vector,
    Work,
    log_factorials,
    log_integers,
)

DROP = 45.0
"""A window of an integer-order sum ends where its terms are e^-DROP of its peak (or larger)."""

MAX_WINDOW = 4096
"""At most this many terms on each side of a peak (the rest is bounded, soundly, not summed)."""

WINDOW_BUDGET = 100_000
"""Exact terms per curve for the integer orders (about); wider windows are narrowed until they
fit, what they leave out bounded instead of summed."""

LOG_EXPM1_EXACT = 40.0
"""For x >= this, x + log1p(-e^-x) rounds to x itself: |log1p(-e^-x)| < 5e-18, below half the
spacing of floats near x (>= 2^-48 from 32 on)."""


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
class Rows:
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
        object.__setattr__(self, "lf_alpha", log_factorials()[self.alpha])
        object.__setattr__(self, "alpha_less_1", self.alpha - 1)
        object.__setattr__(self, "lq_less_l1q", self.lq - self.l1q)
        object.__setattr__(self, "two_a", 2.0 * self.a)

    def take(self, sel: IntVector) -> Rows:
        """The rows ``sel`` (gathered once, for the many evaluations of a bisection)."""
        group = None if self.group is None else self.group[sel]
        return Rows(
            lq=self.lq[sel], l1q=self.l1q[sel], a=self.a[sel], alpha=self.alpha[sel], group=group
        )

    def f(self, i: IntVector, sel: IntVector | slice = slice(None)) -> Vector:
        """log of the term i of A (before the expm1 refinement): log w_i + a (i^2 - i); i is
        clipped to [0, alpha] (bisections evaluate their predicates everywhere, the value only
        matters inside)."""
        lf = log_factorials()
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
        log_n = log_integers()
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


def _pieces(rows: Rows) -> list[tuple[str, IntVector, IntVector]]:
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
    rows: Rows,
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
    rows: Rows,
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


def _windows(rows: Rows, work: Work, width: IntVector) -> _Windows:
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


def _window_log_sums(rows: Rows, owner: IntVector, first: IntVector, size: IntVector) -> Vector:
    """log of the sum of the exact terms of each window (row ``owner``, indices ``first`` ..
    ``first + size - 1``, size >= 1), with its rounding margin."""
    # the exact terms of every window, flattened window after window; a window's row parameters
    # repeated over its terms (np.repeat, not a gather per term), the arrays updated in place
    offsets = np.cumsum(size) - size
    i = np.arange(int(size.sum()), dtype=np.int64)
    i -= np.repeat(offsets - first, size)
    lf = log_factorials()
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


def integer_log_am1(rows: Rows, curve: IntVector, work: Work) -> Vector:
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
        lf = log_factorials()
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
