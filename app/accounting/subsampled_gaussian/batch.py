"""The subsampled Gaussian's RDP on the grid: the least of the bounds at each order.

Integer orders take the sum of ``integer_orders``. Fractional orders (all below 11) take the
least of four upper bounds:

* the signed series of ``signed_series``;
* the Taylor bound of ``taylor_bound``;
* the chord of the convex (alpha - 1) eps(alpha) [docs/formulas.md §0.1, 2.5; WBK19 Cor 10] between
  the neighbouring integer orders (alpha = 1 contributes 0);
* the Gaussian without subsampling, alpha / (2 sigma^2) (joint convexity).

Last, eps(alpha) <= eps(beta) for beta >= alpha (RDP is non-decreasing in the order), so each
order takes the least bound found at it or above it. No fallback value is ever carried to
higher orders (the running maximum used before copied a fallback at order 2 onto 1.1 .. 1.9,
6-21 % looser than dp_accounting at q = 0.5).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from app.accounting.orders import INTEGER_MASK, ORDERS
from app.accounting.rounding import TINY
from app.accounting.subsampled_gaussian.integer_orders import Rows, integer_log_am1
from app.accounting.subsampled_gaussian.numerics import Mask, U, Vector, Work, blocks
from app.accounting.subsampled_gaussian.signed_series import SERIES_TERMS, mtz_log_a
from app.accounting.subsampled_gaussian.taylor_bound import (
    TAYLOR_K,
    log_moments,
    taylor_log_am1,
    taylor_useful,
)


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
    useful = taylor_useful(q, sigma)
    curves = np.flatnonzero(useful) if (~INTEGER_MASK & mask).any() else np.zeros(0, np.int64)
    moments = log_moments(0.5 / sigma[curves] ** 2, work)
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


def _rdp_chunk(
    q: Vector,
    sigma: Vector,
    mask: Mask,
    work: Work,
    moments: tuple[Vector, Vector],
    spread: Vector | None = None,
) -> Vector:
    """``rdp_batch`` of a few curves; ``moments``: ``log_moments`` of those where
    ``taylor_useful``, in order; ``spread`` (rows as the curves) filled as ``rdp_batch``'s."""
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
        pairs = Rows(
            lq=lq[r_of],
            l1q=l1q[r_of],
            a=0.5 / sigma[r_of] ** 2,
            alpha=ORDERS[o_of].astype(np.int64),
            group=r_of // GROUP,
        )
        log_am1 = integer_log_am1(pairs, r_of, work)
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
        useful = taylor_useful(q, sigma)
        sel = np.flatnonzero(useful[r_of])
        if sel.size:
            curves = np.flatnonzero(useful)  # (sel: every fractional order of these curves)
            parts = [
                taylor_log_am1(
                    lq[curves[block]],
                    l1q[curves[block]],
                    frac_idx,
                    (moments[0][block], moments[1][block]),
                )
                for block in blocks(curves.size, frac_idx.size * (TAYLOR_K + 1))
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
                mtz_log_a(lq[r], l1q[r], sigma[r], o_of[part], work)
                for block in blocks(rest.size, SERIES_TERMS)
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
