"""Composing many mechanisms, or many stored curves, at once.

``compose_sequence`` is what a compose request calls: each kind's distinct unit curves computed
together, the entries' curves summed in order, bit for bit as a dataset's running total of the
same charges. ``compose_many`` composes a whole ledger fastest: identical mechanisms are
grouped (their repetitions added), the distinct unit curves of each kind are computed together
by that kind's vectorised formula (``Mechanism.unit_curves``, the same numbers as one by one),
and the weighted sum is taken as one matrix product; kinds affine in the order (Gaussian, zCDP)
are not grouped, their sum being two dot products over the entries. ``compose_arrays`` sums
curves that are already known (a ledger's stored entry curves).

Rounding: every term is non-negative, so a float sum of n products differs from the exact sum
by at most gamma_{n+1} = (n + 1) u / (1 - (n + 1) u) of itself (Higham, Accuracy and Stability of
Numerical Algorithms, 2nd ed., section 3.1, any order of summation); the result is raised by
twice that, then by one ulp, so it is never below the exact sum (relative excess about n u:
1e-11 for 100,000 entries). The entry-by-entry path (``PrivacyCurve.__add__``) rounds each
addition up instead; both are upper bounds on the exact sum and agree to that margin.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy import sparse

from app.accounting.curve import PrivacyCurve, Vector
from app.accounting.kinds._spec import (
    MAX_COUNT,
    RDP_EVAL_MARGIN,
    Affine,
    Mechanism,
    UnitCurves,
    Units,
    column,
    params_of,
)
from app.accounting.orders import ORDERS
from app.accounting.rounding import add_up, mul_up, rounding_upward

U = 2.0**-53


def _raise(total: Vector, terms: int | npt.NDArray[np.int64]) -> Vector:
    """``total`` (a float sum of ``terms`` non-negative products, or sums of as many, each
    broadcast with its sum) raised above the exact sum; a sum of zeros stays exactly 0 (every
    term was 0), and ``terms`` = 0 marks a sum known to be exact (one term times 1.0)."""
    gamma = (terms + 1) * U / (1.0 - (terms + 1) * U)
    with np.errstate(over="ignore"):
        raised = np.nextafter(total * (1.0 + 2.0 * gamma), np.inf)
    return np.where((total == 0.0) | (terms == 0), total, raised)


CHUNK = 128
"""Distinct curves summed per weighted sum (each sum then raised and added to the total)."""

COMPUTE_CHUNK = 1024
"""Distinct curves computed per call of a kind's vectorised formula (a multiple of ``CHUNK``:
fewer calls, the same curves, summed ``CHUNK`` at a time as before; bounded memory)."""


def _dot(weights: Vector, values: Vector) -> Vector:
    """``weights @ values`` in numpy's own loops, not BLAS: a threaded BLAS splits a large
    product over the cores and its threads then spin-wait, which cost more CPU than the
    product (a 100,000-entry all-distinct compose: 0.36 s of CPU with BLAS, 0.24 s without, on
    2 cores). Any order of summation is within the bound of ``_raise``."""
    out: Vector = np.einsum("i,i...->...", weights, values)
    return out


def _weighted_sum(curves: UnitCurves, weights: Vector) -> PrivacyCurve:
    """sum_i weights_i curve_i (weights >= 1, so an infinite value stays infinite, never NaN)."""
    n = weights.size
    if n == 0:
        return PrivacyCurve.zero()
    return _chunk_sums(curves, weights, n).row(0)


def _affine_sum(affine: Affine, weights: Vector) -> PrivacyCurve:
    """sum_i w_i (intercept_i + slope_i alpha) (1 + margin) from two dot products, each raised
    above its exact value; the result is raised once more by 4 u so that it is not below the sum
    of the entries' own rounded curves either."""
    n = weights.size
    slope = float(_raise(_dot(weights, affine.slope), n))
    intercept = float(_raise(_dot(weights, affine.intercept), n))
    with np.errstate(over="ignore"):
        rdp = (intercept + slope * ORDERS) * (1.0 + RDP_EVAL_MARGIN) * (1.0 + 8.0 * U)
    return PrivacyCurve(
        rho=float(_raise(_dot(weights, affine.rho), n)),
        rdp=np.where(rdp == 0.0, 0.0, np.nextafter(rdp, np.inf)),
        pure_eps=float(_raise(_dot(weights, affine.pure_eps), n)),
        gaussian_only=affine.gaussian_only,
        delta=min(1.0, float(_raise(_dot(weights, affine.delta), n))),
    )


def compose_arrays(curves: UnitCurves) -> PrivacyCurve:
    """The composition of curves given as arrays (row i = one entry, repetitions included),
    e.g. a ledger's stored entry curves; never below the exact sum."""
    return _weighted_sum(curves, np.ones(curves.rho.size))


def _add(a: PrivacyCurve, b: PrivacyCurve) -> PrivacyCurve:
    return PrivacyCurve(
        rho=add_up(a.rho, b.rho),
        rdp=add_up(a.rdp, b.rdp),
        pure_eps=add_up(a.pure_eps, b.pure_eps),
        gaussian_only=a.gaussian_only and b.gaussian_only,
        delta=min(1.0, add_up(a.delta, b.delta)),
    )


def _read_columns(ms: list[Mechanism], names: list[str]) -> Vector:
    """Attributes ``names`` (two or more, all numbers) of each of ``ms`` as an (n, k) float64
    array, read in one C-level pass that visits each object once: the same values ``column``
    gives name by name (a 100,000-entry ledger's objects are scattered in memory, and each
    visit of an object costs a cache miss)."""
    flat = itertools.chain.from_iterable(map(operator.attrgetter(*names), ms))
    out: Vector = np.fromiter(flat, dtype=np.float64, count=len(ms) * len(names))
    return out.reshape(len(ms), len(names))


def _sorted_groups(values: Vector) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]:
    """``np.unique(values, return_index=True, return_inverse=True)[1:]``, groups in increasing
    order of value, by numpy's unstable sort (vectorised; np.unique sorts stably to return first
    occurrences, several times slower): ``first`` holds one member of each group, not always
    the first one, which is all a group needs (its members have the same parameters)."""
    order = np.argsort(values, kind="quicksort")
    ordered = values[order]
    starts = np.empty(values.size, dtype=bool)
    starts[:1] = True
    np.not_equal(ordered[1:], ordered[:-1], out=starts[1:])
    inverse = np.empty(values.size, dtype=np.intp)
    inverse[order] = np.cumsum(starts) - 1
    first: npt.NDArray[np.intp] = order[starts]
    return first, inverse


def _is_affine(cls: type[Mechanism]) -> bool:
    """Whether kind ``cls`` gives its curves as an ``Affine`` (it overrides ``_affine``)."""
    overridden: bool = cls._affine.__func__ is not Mechanism._affine.__func__  # type: ignore[attr-defined]
    return overridden


def _groups(cls: type[Mechanism], ms: list[Mechanism]) -> tuple[list[Mechanism], Vector]:
    """The distinct unit mechanisms among ``ms`` (all of kind ``cls``) and the total
    repetitions of each: by one sort of their parameters when they are all scalars (then a
    ``Units`` that keeps those parameters as columns), else by a dictionary of their keys.

    A kind whose curve is affine in the order (``_is_affine``) is not grouped: its weighted sum
    is two dot products over the entries whatever their number, so grouping would only add a
    sort; each entry is its own unit, weighted by its count."""
    keys = [p for p in params_of(cls) if p.name not in cls.repetition_params]
    scalars = all(p.type != "float_list" for p in keys)
    one_pass = cls.repetition_params == ("count",) and scalars and bool(keys)
    if one_pass:  # the count and the parameters, each object visited once
        read = _read_columns(ms, ["count", *(p.name for p in keys)])
        reps, table = read[:, 0], read[:, 1:]
    elif cls.repetition_params == ("count",):
        reps = column(ms, "count")
    else:
        reps = np.array([m.repetitions() for m in ms], dtype=np.float64)
    if reps.size and reps.max() > MAX_COUNT:
        ms[int(np.argmax(reps))].curve()  # raises the per-entry error
    if one_pass and _is_affine(cls):
        return Units(ms, {p.name: table[:, j] for j, p in enumerate(keys)}), reps
    if scalars:
        if not one_pass:
            table = np.empty((len(ms), len(keys)), dtype=np.float64)
            for j, p in enumerate(keys):
                table[:, j] = column(ms, p.name)
        varying = table[:, (table != table[:1]).any(axis=0)] if len(ms) else table
        if varying.shape[1] <= 1:  # one varying parameter (or none): a plain sort
            values = varying[:, 0] if varying.shape[1] else np.zeros(len(ms))
            first, inverse = _sorted_groups(values)
        else:
            _, first, inverse = np.unique(varying, axis=0, return_index=True, return_inverse=True)
        totals: Vector = np.bincount(inverse.ravel(), weights=reps).astype(np.float64)
        picked = [ms[i] for i in first.tolist()]
        if cls.unit is Mechanism.unit and cls.repetition_params == ("count",):
            # the base unit(): the mechanism itself when its count (reps) is 1
            ones = reps[first] == 1.0
            distinct = (
                picked
                if ones.all()
                else [m if one else m.unit() for m, one in zip(picked, ones.tolist(), strict=True)]
            )
        else:
            distinct = [m.unit() for m in picked]
        # the parameters of the units are those of the picked entries (a unit differs only in
        # its repetitions): kept, so that computing the curves does not read them again
        kept = {p.name: table[first, j] for j, p in enumerate(keys)}
        return Units(distinct, kept), totals
    index: dict[tuple[Any, ...], int] = {}
    units: list[Mechanism] = []
    sums: list[float] = []
    for m, r in zip(ms, reps, strict=True):
        j = index.setdefault(m.unit_key(), len(units))
        if j == len(units):
            units.append(m.unit())
            sums.append(0.0)
        sums[j] += r
    return units, np.asarray(sums, dtype=np.float64)


def compose_many(mechanisms: Iterable[Mechanism]) -> PrivacyCurve:
    """The composition of ``mechanisms`` (each with its count): identical parameter sets
    grouped (not for kinds affine in the order: ``_groups``), the distinct unit curves of each
    kind computed together, one weighted sum per kind. Never below the exact sum of the
    entries' curves (module docstring). ValueError when a mechanism's curve overflows or its
    repetitions exceed the per-entry limit."""
    # by kind, in the ledger's order: one pass that reads each object once (its type) and
    # appends it to its kind's list; per-kind passes over a list of the types cost twice as
    # much on a 100,000-entry ledger whose objects are scattered in memory
    by_kind: dict[type[Mechanism], list[Mechanism]] = {}
    for m in mechanisms:
        cls = type(m)
        same = by_kind.get(cls)
        if same is None:
            by_kind[cls] = same = []
        same.append(m)
    total = PrivacyCurve.zero()
    for cls, ms in sorted(by_kind.items(), key=lambda kv: kv[0].kind):
        units, weights = _groups(cls, ms)
        affine = cls._affine(units)
        if affine is not None:
            total = _add(total, _affine_sum(affine, weights))
            continue
        sums = [UnitCurves.stack([total])]
        for k in range(0, len(units), COMPUTE_CHUNK):
            curves = cls.unit_curves(units[k : k + COMPUTE_CHUNK])
            sums.append(_chunk_sums(curves, weights[k : k + COMPUTE_CHUNK]))
        total = compose_in_order(UnitCurves.concatenate(sums))
    return total


def compose_sequence(mechanisms: Sequence[Mechanism]) -> PrivacyCurve:
    """The composition of ``mechanisms`` bit for bit as adding their ``Mechanism.curve()`` one
    by one in order (``PrivacyCurve.__add__``: what a dataset's running total of the same
    charges holds), with each kind's distinct unit curves computed together: each entry's
    curve is its unit's row scaled by its repetitions as ``PrivacyCurve.scaled`` does
    (``mul_up``; exact for one), and the rows are folded by ``compose_in_order``. A compose
    request uses it: one by one, 10,000 distinct k-ary randomized responses took 8.5 s of CPU.
    ValueError when an entry's repetitions exceed the per-entry limit."""
    n = len(mechanisms)
    if n == 0:
        return PrivacyCurve.zero()
    reps = np.empty(n)
    where = np.empty(n, dtype=np.int64)  # the entry's unit, among its kind's
    kind_of = np.empty(n, dtype=np.int64)  # the entry's kind, its slot in ``units``
    slots: dict[type[Mechanism], int] = {}
    keys: list[dict[Any, int]] = []
    units: list[list[Mechanism]] = []
    for i, m in enumerate(mechanisms):
        reps[i] = count = m.repetitions()
        if count > MAX_COUNT:
            m.curve()  # raises the per-entry error
        c = slots.setdefault(type(m), len(slots))
        if c == len(units):
            keys.append({})
            units.append([])
        j = keys[c].setdefault(m.unit_key(), len(units[c]))
        if j == len(units[c]):
            units[c].append(m.unit())
        where[i], kind_of[i] = j, c
    rows = np.empty((n, ORDERS.size))
    rho, pure, delta = np.empty(n), np.empty(n), np.empty(n)
    gaussian = np.empty(n, dtype=bool)
    for cls, c in slots.items():
        us = units[c]
        curves = UnitCurves.concatenate(
            [cls.unit_curves(us[k : k + COMPUTE_CHUNK]) for k in range(0, len(us), COMPUTE_CHUNK)]
        )
        mine = np.flatnonzero(kind_of == c)
        idx, r = where[mine], reps[mine]
        with np.errstate(over="ignore", invalid="ignore"):
            rows[mine] = mul_up(curves.rdp[idx], r[:, None])
            rho[mine] = mul_up(curves.rho[idx], r)
            pure[mine] = mul_up(curves.pure_eps[idx], r)
            delta[mine] = np.minimum(1.0, mul_up(curves.delta[idx], r))
        gaussian[mine] = curves.gaussian_only[idx]
    return compose_in_order(
        UnitCurves(rho=rho, rdp=rows, pure_eps=pure, delta=delta, gaussian_only=gaussian)
    )


def _chunk_sums(curves: UnitCurves, weights: Vector, chunk: int = CHUNK) -> UnitCurves:
    """Row c: sum_i weights_i curve_i over the ``chunk`` curves from c * chunk on, raised above
    the exact sum (the raises computed for every chunk at once). Folding these rows with
    ``compose_in_order`` adds them as ``_add`` would one by one."""
    n = weights.size
    starts = np.arange(0, n, chunk)
    rdp = np.empty((starts.size, ORDERS.size))
    rho, pure, delta = np.empty(starts.size), np.empty(starts.size), np.empty(starts.size)
    with np.errstate(over="ignore"):
        for c, j in enumerate(starts.tolist()):
            w = weights[j : j + chunk]
            rdp[c] = _dot(w, curves.rdp[j : j + chunk])
            rho[c] = _dot(w, curves.rho[j : j + chunk])
            pure[c] = _dot(w, curves.pure_eps[j : j + chunk])
            delta[c] = _dot(w, curves.delta[j : j + chunk])
    terms = np.minimum(chunk, n - starts)
    # a chunk of one curve taken once is that curve itself, exactly: not raised (a single
    # Laplace of epsilon 0.5 composed to 0.5000000000000003)
    terms = np.where((terms == 1) & (weights[starts] == 1.0), 0, terms)
    gaussian = np.logical_and.reduceat(curves.gaussian_only, starts)
    return UnitCurves(
        rho=_raise(rho, terms),
        rdp=_raise(rdp, terms[:, None]),
        pure_eps=_raise(pure, terms),
        delta=np.minimum(1.0, _raise(delta, terms)),
        gaussian_only=gaussian,
    )


def compose_in_order(curves: UnitCurves) -> PrivacyCurve:
    """The curves of ``curves`` (row i = one entry) added one by one in row order, bit for bit
    what folding ``PrivacyCurve.__add__`` over them gives (each addition rounded up, the delta
    capped at 1 after each): a ledger's running totals are kept that way, so a consistent
    database matches this exactly. The additions of rho, pure_eps, delta and the RDP vector run
    together on one row of |ORDERS| + 3 values.

    Where the hardware rounds toward +infinity for us (``rounding_upward``), each row is one
    numpy addition in that mode: the correctly rounded-up sum, which is what ``add_up``'s
    TwoSum and one step up give, about 15x faster. Deltas are never negative, so capping the
    delta once at the end equals capping it after every addition (once past 1 it stays past
    1). Elsewhere, or with a negative delta, ``_in_order_software`` does the same sums."""
    n, m = curves.rdp.shape[0], ORDERS.size
    if n == 0:
        return PrivacyCurve.zero()
    rows = np.empty((n, m + 3), dtype=np.float64)
    rows[:, :m] = curves.rdp
    rows[:, m], rows[:, m + 1], rows[:, m + 2] = curves.rho, curves.pure_eps, curves.delta
    acc: Vector | None = None
    if bool((curves.delta >= 0.0).all()):
        with np.errstate(invalid="ignore", over="ignore"), rounding_upward() as upward:
            if upward:
                acc = rows[0].copy()
                for row in rows[1:]:
                    np.add(acc, row, out=acc)
        if acc is not None:
            acc[m + 2] = min(acc[m + 2], 1.0)
    if acc is None:
        acc = _in_order_software(rows)
    return PrivacyCurve(
        rho=float(acc[m]),
        rdp=acc[:m].copy(),
        pure_eps=float(acc[m + 1]),
        gaussian_only=bool(curves.gaussian_only.all()),
        delta=float(acc[m + 2]),
    )


def _in_order_software(rows: Vector) -> Vector:
    """``compose_in_order``'s sums with ``add_up``'s arithmetic (TwoSum, then one step up where
    the error is positive), on preallocated buffers, the delta (last column) capped after each
    addition."""
    width = rows.shape[1]
    acc = np.zeros(width)
    s, bb, t = np.empty(width), np.empty(width), np.empty(width)
    up = np.empty(width, dtype=bool)
    last = width - 1
    with np.errstate(invalid="ignore", over="ignore"):
        for row in rows:
            np.add(acc, row, out=s)
            np.subtract(s, acc, out=bb)
            np.subtract(s, bb, out=t)
            np.subtract(acc, t, out=t)
            np.subtract(row, bb, out=bb)
            np.add(t, bb, out=t)
            np.greater(t, 0.0, out=up)
            np.nextafter(s, np.inf, out=s, where=up)
            acc, s = s, acc
            if acc[last] > 1.0:
                acc[last] = 1.0
    return acc


Ints = np.ndarray[Any, np.dtype[np.int64]]


@dataclass(frozen=True)
class RangeSums:
    """Per segment of positions (``edges[j]`` up to ``edges[j + 1]``, exclusive), bounds on
    the exact sum of the curves whose ranges cover it: ``lower`` and ``upper`` rows of
    |ORDERS| + 3 values (RDP, rho, pure_eps, delta), the number of entries and of non-Gaussian
    entries (exact), and ``terms``, the number of (curve, range) groups summed."""

    edges: Ints
    lower: Vector
    upper: Vector
    entries: Ints
    non_gaussian: Ints
    terms: int

    def segment(self, position: int) -> int | None:
        """The segment holding ``position``, or None when no range reaches it."""
        j = int(np.searchsorted(self.edges, position, side="right")) - 1
        return j if 0 <= j < self.entries.size else None

    def upper_curve(self, j: int) -> PrivacyCurve:
        """Segment ``j``'s sum as a curve never below the exact sum (what a rebuild writes)."""
        m = ORDERS.size
        row = self.upper[j]
        return PrivacyCurve(
            rho=float(row[m]),
            rdp=row[:m],
            pure_eps=float(row[m + 1]),
            gaussian_only=bool(self.non_gaussian[j] == 0),
            delta=min(1.0, float(row[m + 2])),
        )

    def holds(self, j: int | None, stored: PrivacyCurve, additions: int) -> bool:
        """Whether ``stored`` can be segment ``j``'s sum (None: an empty sum) as a running total
        keeps it: the same Gaussian-only flag; rho, pure_eps and every RDP value at least the
        lower bound (a running total rounds up, never down) and at most the upper bound raised
        by what ``additions`` round-up additions can add on top of an earlier upper bound
        (``matches_running_sum``). The entries' delta too, as a running total caps it at 1:
        a tally's filter converts at its budget delta less that sum."""
        if j is None:
            return bool(
                stored.rho == 0.0
                and stored.pure_eps == 0.0
                and stored.delta == 0.0
                and stored.gaussian_only
                and not stored.rdp.any()
            )
        m = ORDERS.size
        if stored.gaussian_only != bool(self.non_gaussian[j] == 0):
            return False
        values = np.concatenate((stored.rdp, [stored.rho, stored.pure_eps, stored.delta]))
        lower = self.lower[j].copy()
        lower[m + 2] = min(1.0, float(lower[m + 2]))  # the stored sum is capped at 1
        return matches_running_sum(values, lower, self.upper[j], self.terms, additions)


def _lower(total: Vector, terms: int) -> Vector:
    """``total`` (a float sum of ``terms`` non-negative products) lowered below the exact sum:
    the exact sum is at least total / (1 + gamma) >= total (1 - 2 gamma)."""
    gamma = (terms + 1) * U / (1.0 - (terms + 1) * U)
    with np.errstate(over="ignore", invalid="ignore"):
        lowered = np.nextafter(total * (1.0 - 2.0 * gamma), 0.0)
    return np.where(np.isinf(total), np.inf, np.where(total == 0.0, 0.0, lowered))


def matches_running_sum(
    stored: Vector, lower: Vector, upper: Vector, terms: int, additions: int
) -> bool:
    """Whether ``stored`` is within what a running sum of the same curves can hold, when
    [``lower``, ``upper``] bounds their exact sum (``upper`` raised from a float sum of
    ``terms`` products, as ``_raise`` does). A running sum adds with ``add_up`` (each addition
    at most one part in 2^52 above: (1 + 2u)^additions <= 1 + 2 (additions + 1) u), from zero
    or from an earlier rebuild's ``upper`` (at most 1 + 2 (2 gamma_terms + 2u) above): so
    lower <= stored <= upper (1 + (4 (terms + 3) + 2 (additions + 1)) u), one ulp more."""
    slack = (4 * (terms + 3) + 2 * (additions + 1)) * U
    with np.errstate(over="ignore", invalid="ignore"):
        ceiling = np.nextafter(upper * (1.0 + slack), np.inf)
    return bool(((stored >= lower) & (stored <= ceiling)).all())


def compose_ranges(
    curves: UnitCurves, which: Ints, counts: Ints, first: Ints, last: Ints
) -> RangeSums:
    """For every position p, the sum over groups g with ``first[g]`` <= p <= ``last[g]`` of
    ``counts[g]`` times curve ``which[g]`` of ``curves``: the sums of a partitioned ledger's
    blocks, each entry's curve counted in every block of its range, in O((groups log segments
    + segments) x |ORDERS|) work, never groups x span.

    Positions are compressed to segments between the ranges' ends (every position of a segment
    is covered by the same groups). Each group's range is split into the O(log segments)
    canonical nodes of a segment tree; the (node, curve) counts form a sparse matrix (integer
    counts, exact) whose product with the distinct curves gives each node's sum, and each leaf
    adds its ancestors' sums down the tree. Only additions of non-negative values and products
    with exact counts: a leaf is a float evaluation, in some order, of at most ``groups``
    products, so ``_raise`` and ``_lower`` bound the exact sum (module docstring); a prefix sum
    with subtractions (a difference array) would have no such bound."""
    groups = which.size
    m = ORDERS.size
    if groups == 0:
        empty = np.zeros((0, m + 3))
        none = np.zeros(0, dtype=np.int64)
        return RangeSums(none, empty, empty, none, none, 0)
    edges = np.unique(np.concatenate((first, last + 1)))
    lo, hi = np.searchsorted(edges, first), np.searchsorted(edges, last + 1)
    segments = edges.size - 1
    size = 1 << (segments - 1).bit_length()  # leaves: a power of two >= segments
    nodes: list[Ints] = []
    owners: list[Ints] = []
    left, right = lo + size, hi + size  # half-open [left, right) on the tree's leaves
    while True:
        live = left < right
        if not live.any():
            break
        take = live & (left % 2 == 1)
        nodes.append(left[take])
        owners.append(np.flatnonzero(take))
        left = left + take
        take = live & (right % 2 == 1)
        right = right - take
        nodes.append(right[take])
        owners.append(np.flatnonzero(take))
        left, right = left // 2, right // 2
    node, owner = np.concatenate(nodes), np.concatenate(owners)
    # columns: RDP, rho, pure_eps, delta, then two exact counts: entries, non-Gaussian entries
    values = np.empty((curves.rho.size, m + 5))
    values[:, :m] = curves.rdp
    values[:, m], values[:, m + 1], values[:, m + 2] = curves.rho, curves.pure_eps, curves.delta
    values[:, m + 3] = 1.0
    values[:, m + 4] = ~curves.gaussian_only
    weights = sparse.csr_matrix(
        (counts[owner].astype(np.float64), (node, which[owner])),
        shape=(2 * size, curves.rho.size),
    )  # duplicates (node, curve) are summed: integers, exact
    with np.errstate(over="ignore", invalid="ignore"):
        tree = np.asarray(weights @ values)
        width = 1
        while width < size:  # each level's sums added into both children
            parents = tree[width : 2 * width]
            tree[2 * width : 4 * width : 2] += parents
            tree[2 * width + 1 : 4 * width : 2] += parents
            width *= 2
    leaves = tree[size : size + segments]
    total = leaves[:, : m + 3]
    return RangeSums(
        edges=edges.astype(np.int64),
        lower=_lower(total, groups),
        upper=_raise(total, groups),
        entries=np.rint(leaves[:, m + 3]).astype(np.int64),
        non_gaussian=np.rint(leaves[:, m + 4]).astype(np.int64),
        terms=groups,
    )


__all__ = [
    "RangeSums",
    "compose_arrays",
    "compose_in_order",
    "compose_many",
    "compose_ranges",
    "matches_running_sum",
]
