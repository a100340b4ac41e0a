"""Privacy loss distributions (PLD): a composed, pessimistic, bounded-size ledger state.

A PLD is the distribution of the privacy loss L = log(p(o) / q(o)) with o ~ P = M(x), for the
worst neighbouring pair (x, x'). Its hockey-stick curve

    delta(eps) = Pr[L = inf] + E[(1 - e^{eps - L})_+]

is the exact (eps, delta)-DP curve of the pair, and the PLD of a composition is the convolution
of the PLDs (Koskela, Jalko, Honkela 2020; Meiser, Mohammadi 2018). For mechanisms whose two
directions differ (the Poisson-subsampled Gaussian under add/remove) a ``Pld`` keeps both the
"remove" PLD (P = M(x), Q = M(x')) and the "add" PLD (the pair swapped) and reports the larger
value, as dp_accounting's ``PrivacyLossDistribution`` does.

**Representation.** Losses live on the grid ``k * interval``: ``PldPmf`` holds the masses of a
contiguous range of k (``lower``, ``probs``) and the mass at +infinity. Construction from
mechanism parameters is in ``pld_mechanisms`` (dp_accounting's pessimistic constructions).

**Soundness invariant.** A stored pmf always equals the PLD of a *dominating pair* (a pair of
distributions whose hockey-stick curve is >= the true one at every eps, positive or negative)
plus non-negative extra mass. Everything computed from it is then an upper bound:
composition of dominating pairs dominates the (adaptive) composition [Zhu, Dong, Wang 2022,
"Optimal accounting of differential privacy via characteristic function", AISTATS], and every
operation below is monotone in extra mass. The operations keep the invariant:

* rounding a loss *up* (rebinning to a coarser grid, moving the lowest tail mass up to the
  first kept point) and moving mass to +infinity keep a dominating pair (the missing
  Q-mass goes to an outcome with P-mass 0, which no hockey stick sees);
* convolution by FFT has rounding error; the computed values are clipped at 0 and an upper
  bound on the L1 norm of the error is added to the infinity mass (``_fft_error_bound``):
  the deficit against the exact convolution is thereby moved to +infinity, the surplus is
  extra mass. Direct convolution (short kernels) sums non-negative terms, so its relative
  error is bounded and covered by a multiplicative margin;
* sums of non-negative terms (rebinning, tails, queries) carry a relative margin.

**Bounded memory.** A pmf never holds more than ``MAX_SUPPORT`` points: before a convolution
whose result would be longer, both operands are rebinned pessimistically to an interval twice
as coarse (losses rounded up), as often as needed. Tails are truncated after every
convolution (``LEFT_TAIL_MASS`` rounded up onto the lowest kept loss, ``RIGHT_TAIL_MASS`` to
+infinity),
so the support follows the bulk of the distribution instead of growing with the ledger.
The interval a dataset starts with comes from its budget (``interval_for_budget``); it only
ever grows, by powers of two.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy import fft as sp_fft

from app.accounting import conversions as conv
from app.accounting.rounding import up

Vector = npt.NDArray[np.float64]

BASE_INTERVAL = 1e-4
"""Finest loss grid: dp_accounting's default ``value_discretization_interval``."""

MAX_SUPPORT = 2**20
"""Most grid points one pmf may hold (8 MiB as float64; a state holds at most two pmfs)."""

LEFT_TAIL_MASS = 1e-12
"""Mass at the lowest losses moved up onto the lowest kept point per convolution: always
pessimistic, and it can raise a later delta by at most this much (FFT noise of ~1e-18 per
point would otherwise keep the far-left tail from ever being cut)."""

RIGHT_TAIL_MASS = 1e-14
"""Mass at the highest losses moved to +infinity per convolution: adds exactly this much to
delta at most (dp_accounting truncates 1e-15 in all per composition)."""

MAX_FINITE_LOSS = 700.0
"""Queries treat losses above this as +infinity (pessimistic; keeps e^{-loss} normal)."""

HEAVY_POINTS = 16
"""Per operand, at most this many heavy points are convolved directly rather than by FFT."""

HEAVY_MASS = 2.0**-10
"""A point is heavy if it holds at least this much mass (see _convolve_arrays)."""

_U = 2.0**-53  # unit round-off of float64
SUM_MARGIN = 2.0**-30
"""Relative margin for sums of at most 2**22 non-negative float64 terms ((n + 16) u < 2^-30)."""

SELF_COMPOSE_MARGIN = 1e-14
"""Target FFT error bound of one ``self_compose``, per level of squaring (see there)."""

EXTENDED_BELOW_DELTA = 1e-6
"""Datasets with a smaller budget delta compose in long double (``state_for_budget``)."""

_SPAN_SIGMAS = 9.0  # half-width, in standard deviations, of a Gaussian PLD after truncation

LONG_DOUBLE_WEIGHT = 4
"""Work units (``PldWork``) per grid point of a convolution run in long double: an FFT
convolution of 2^19 + 2^19 points took 67 ms in double and 266 ms in long double (2-core
machine, load 5)."""


class PldWorkExceeded(ValueError):
    """Building a distribution would take a request's ``PldWork`` past its limit: raised before
    the step that would, so the work done stays within it. ``needed`` is what the work would
    have reached (a lower bound of what the whole construction needs)."""

    def __init__(self, needed: float, limit: float, what: str = "") -> None:
        self.needed, self.limit, self.what = float(needed), float(limit), what
        head = f"{what}: " if what else ""
        super().__init__(
            f"{head}building its privacy loss distribution would take more than the "
            f"{limit:,.0f} units of work one request may spend on PLDs (needed at least "
            f"{needed:,.0f})"
        )


class PldWork:
    """A counted budget of PLD work (never a deadline): construction steps and convolutions
    ``charge`` it *before* they run, and the step that would pass ``limit`` raises
    ``PldWorkExceeded`` instead of running. One unit is about one grid point through one
    double-precision FFT convolution (about 65 ns of CPU at 2^19 points on a loaded 2-core
    machine); ``pld_mechanisms`` prices constructions in the same unit. ``limit`` infinite:
    counted only."""

    __slots__ = ("limit", "spent")

    def __init__(self, limit: float = math.inf) -> None:
        self.limit = float(limit)
        self.spent = 0.0

    @property
    def remaining(self) -> float:
        return self.limit - self.spent

    def charge(self, units: float) -> None:
        """Count ``units`` of work about to be done; ``PldWorkExceeded`` (nothing counted) when
        they would take the total past the limit."""
        if self.spent + units > self.limit:
            raise PldWorkExceeded(self.spent + units, self.limit)
        self.spent += units


def interval_for_budget(epsilon: float, delta: float) -> float:
    """The loss grid a dataset with budget (epsilon, delta) starts with.

    ``BASE_INTERVAL * 2**j`` with the least j >= 0 such that the PLD of a Gaussian ledger that
    exactly exhausts the budget, N(mu^2/2, mu^2) with mu the largest mu-GDP fitting the budget
    (docs/formulas.md §2.3), spans at most half of ``MAX_SUPPORT`` points over +-9 standard
    deviations (plus 2 nats). Budgets up to epsilon ~ 12 (delta = 1e-6) keep 1e-4, the
    interval dp_accounting uses; larger budgets start coarser instead of hitting the cap later.
    """
    mu = conv.gaussian_mu_for_budget(conv.check_epsilon(epsilon), conv.check_delta(delta))
    span = 2.0 * _SPAN_SIGMAS * mu + 2.0
    interval = BASE_INTERVAL
    while span / interval > MAX_SUPPORT // 2:
        interval *= 2.0
    return interval


def state_for_budget(epsilon: float, delta: float) -> Pld:
    """The empty state of a new dataset: grid from ``interval_for_budget``, and ``extended``
    (long double FFTs, about 5 times the CPU per charge) when delta < ``EXTENDED_BELOW_DELTA``.

    In double precision the FFT error bound adds about 1e-12 to the infinity mass per charge
    (a state of ~1e5 points, entries of ~1e3): a thousand charges cost 1e-9, 0.1 % of a 1e-6
    budget but a whole 1e-9 one; in long double about 2000 times less.
    """
    return Pld.identity(interval_for_budget(epsilon, delta), delta < EXTENDED_BELOW_DELTA)


def _readonly(v: Vector) -> Vector:
    out = np.array(v, dtype=np.float64, copy=True)
    out.setflags(write=False)
    return out


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True, eq=False)
class PldPmf:
    """Masses on losses ``(lower + i) * interval`` (i = 0 .. len - 1) plus a mass at +infinity.

    The interval is held by the enclosing ``Pld``. ``probs`` is read-only, non-negative and
    finite; its total with ``infinity_mass`` may exceed 1 by the margins (extra mass).
    """

    lower: int
    probs: Vector
    infinity_mass: float

    def __post_init__(self) -> None:
        p = np.asarray(self.probs, dtype=np.float64)
        if p.ndim != 1 or p.size == 0:
            raise ValueError("probs must be a non-empty 1-d array")
        if not np.isfinite(p).all() or (p < 0).any():
            raise ValueError("probs must be finite and non-negative")
        if not (math.isfinite(self.infinity_mass) and 0.0 <= self.infinity_mass):
            raise ValueError(f"infinity_mass must be finite and >= 0, got {self.infinity_mass!r}")
        object.__setattr__(self, "lower", int(self.lower))
        object.__setattr__(self, "probs", p if not p.flags.writeable else _readonly(p))
        object.__setattr__(self, "infinity_mass", min(1.0, float(self.infinity_mass)))

    @property
    def size(self) -> int:
        return int(self.probs.size)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PldPmf):
            return NotImplemented
        return (
            self.lower == other.lower
            and self.infinity_mass == other.infinity_mass
            and bool(np.array_equal(self.probs, other.probs))
        )

    __hash__ = None  # type: ignore[assignment]

    # --- pessimistic transformations -----------------------------------------------------

    def trimmed(self, left: float = LEFT_TAIL_MASS, right: float = RIGHT_TAIL_MASS) -> PldPmf:
        """Drop exact zeros at both ends, move the lowest-loss mass (at most ``left``) up onto
        the first kept point and the highest-loss mass (at most ``right``) to +infinity."""
        p = self.probs
        positive = p > 0.0
        if not positive.any():
            return PldPmf(self.lower, np.zeros(1), self.infinity_mass)
        first, last = int(np.argmax(positive)), p.size - 1 - int(np.argmax(positive[::-1]))
        p = p[first : last + 1]
        lower = self.lower + first
        inf = self.infinity_mass
        if p.size > 1:
            left_sums = np.cumsum(p)
            cut_left = int(np.searchsorted(left_sums, left * (1.0 - SUM_MARGIN), side="right"))
            right_sums = np.cumsum(p[::-1])
            cut_right = int(np.searchsorted(right_sums, right * (1.0 - SUM_MARGIN), side="right"))
            cut_left = min(cut_left, p.size - 1)
            cut_right = min(cut_right, p.size - 1 - cut_left)
            if cut_left or cut_right:
                moved_left = (
                    float(left_sums[cut_left - 1]) * (1.0 + SUM_MARGIN) if cut_left else 0.0
                )
                moved_right = (
                    float(right_sums[cut_right - 1]) * (1.0 + SUM_MARGIN) if cut_right else 0.0
                )
                q = np.array(p[cut_left : p.size - cut_right], dtype=np.float64)
                q[0] = up(float(q[0]) + moved_left)
                p = q
                lower += cut_left
                inf = up(inf + moved_right)
        return PldPmf(lower, p, inf)

    def coarsened(self, factor: int) -> PldPmf:
        """Rebin onto a grid ``factor`` times coarser, each loss rounded *up* to the new grid."""
        if factor == 1:
            return self
        if factor < 1:
            raise ValueError(f"factor must be >= 1, got {factor}")
        idx = self.lower + np.arange(self.size, dtype=np.int64)
        new_idx = -((-idx) // factor)
        new_lower = int(new_idx[0])
        binned = np.bincount(new_idx - new_lower, weights=self.probs)
        # each bin sums at most `factor` non-negative terms: relative error < factor * u
        sums = np.asarray(binned, dtype=np.float64) * (1.0 + (factor + 2) * _U)
        return PldPmf(new_lower, sums, self.infinity_mass)

    # --- queries ------------------------------------------------------------------------

    def _finite_part(self, interval: float, above: float) -> tuple[Vector, Vector, float]:
        """(losses, masses) of the points with above < loss <= MAX_FINITE_LOSS, and the
        infinity mass including the points above MAX_FINITE_LOSS. Losses are (lower + i) *
        interval, nudged up by 2 ulps so that float rounding never lowers one."""
        losses = (self.lower + np.arange(self.size, dtype=np.float64)) * interval
        losses = losses + np.abs(losses) * 2.0**-51
        big = losses > MAX_FINITE_LOSS
        inf = self.infinity_mass
        if big.any():
            inf = up(inf + float(np.sum(self.probs[big])) * (1.0 + SUM_MARGIN))
        keep = (losses > above) & ~big
        return losses[keep], self.probs[keep], inf

    def delta(self, epsilon: float, interval: float) -> float:
        """Upper bound on the hockey stick inf + sum_{l > eps} p_l (1 - e^{eps - l}), with the
        relative summation margin, capped at 1."""
        eps = float(epsilon)
        if math.isnan(eps):
            raise ValueError("epsilon must not be NaN")
        losses, masses, inf = self._finite_part(interval, eps)
        if masses.size == 0:
            return min(1.0, inf)
        body = float(np.sum(masses * -np.expm1(eps - losses)))
        return min(1.0, _up_positive(up(inf + body * (1.0 + SUM_MARGIN))))

    def epsilon(self, delta: float, interval: float) -> float:
        """The least eps >= 0 whose ``delta(eps)`` is <= ``delta`` (inf if the infinity mass is
        above it). Located on the grid with suffix sums, solved in closed form inside one grid
        cell (there delta(eps) = U - e^eps V), then checked with ``delta`` and stepped up until
        the check passes, so the answer is consistent with ``delta``."""
        target = float(delta)
        if not 0.0 <= target <= 1.0:
            raise ValueError(f"delta must be in [0, 1], got {delta!r}")
        losses, masses, inf = self._finite_part(interval, 0.0)
        if inf > target:
            return math.inf
        if self.delta(0.0, interval) <= target:
            return 0.0
        if losses.size == 0:  # only the infinity mass, and its margin exceeds the target
            return math.inf
        # suffix sums over the positive losses: U_k = inf + sum_{i>=k} p_i, V_k = sum p_i e^-l_i
        u_suffix = inf + np.cumsum(masses[::-1])[::-1]
        v_suffix = np.cumsum((masses * np.exp(-losses))[::-1])[::-1]
        # delta at each grid point l_j: the points above it are j + 1, ...
        u_next = np.append(u_suffix[1:], inf)
        v_next = np.append(v_suffix[1:], 0.0)
        at_grid = u_next - np.exp(losses) * v_next
        j = int(np.searchsorted(-at_grid, -target, side="left"))  # first grid point at or below
        j = min(j, losses.size - 1)
        cell_low = float(losses[j - 1]) if j > 0 else 0.0
        # inside the cell, with direct (pairwise) sums and the target that ``delta``'s margin
        # leaves, so that the check below usually passes at once
        u_k = inf + float(np.sum(masses[j:]))
        v_k = float(np.sum(masses[j:] * np.exp(-losses[j:])))
        aim = target / (1.0 + SUM_MARGIN) * (1.0 - 2.0**-40)
        if v_k > 0.0 and u_k > aim:
            eps = math.log((u_k - aim) / v_k)
        else:
            eps = float(losses[j])
        eps = min(max(eps, cell_low), float(losses[j]))
        step = max(abs(eps) * 2.0**-48, 2.0**-60)
        while self.delta(eps, interval) > target:
            eps += step
            step *= 2.0
            if step > 1e6:  # pragma: no cover - defensive: delta(+large) = inf mass <= target
                return math.inf
        return eps


def _l2(p: Vector) -> float:
    # plain ufuncs, not np.dot: a threaded BLAS spins badly on a loaded machine
    return math.sqrt(float(np.sum(np.square(p))))


_U_EXTENDED = float(np.finfo(np.longdouble).eps) / 2.0
"""Unit round-off of numpy's long double (2^-64 with x86 80-bit extended precision; where long
double is just double, 2^-53 and the extended path gains nothing but stays sound)."""


def _fft_error_bound(a: Vector, b: Vector, unit: float = _U) -> float:
    """Upper bound on ||fftconvolve(a, b) - a * b||_1 for non-negative a, b computed with unit
    round-off ``unit``.

    Higham, Accuracy and Stability of Numerical Algorithms (2nd ed.), Thm 24.2: a computed FFT
    of length N has ||y^ - y||_2 <= g ||y||_2, g = log2(N) eta / (1 - log2(N) eta), eta about
    6.7 u for accurately computed twiddle factors. Carried through forward transforms,
    pointwise product and inverse transform: ||c^ - c||_2 <= (2 g + 3 u)(|a|_2 |b|_1 + |a|_1 |b|_2),
    and ||.||_1 <= sqrt(M) ||.||_2 over the M = len(a) + len(b) - 1 outputs. We take 16 u per
    stage (mixed-radix FFTs, twiddle error) and one stage more than log2(N).
    """
    m = a.size + b.size - 1
    n_fft = sp_fft.next_fast_len(m, real=True)
    g = 16.0 * unit * (math.log2(n_fft) + 1.0)
    mixed = _l2(a) * float(np.sum(b)) + float(np.sum(a)) * _l2(b)
    return up((2.0 * g + 3.0 * unit) * math.sqrt(m) * mixed)


def _fft_convolve(a: Vector, b: Vector, tolerance: float) -> tuple[Vector, float]:
    """(c, e): FFT convolution of non-negative a, b, clipped at 0, with an L1 error bound e.

    In double precision when its bound is at most ``tolerance``, else in long double (about 5
    times slower, a bound about 2000 times smaller); the long double result is rounded up to
    double (entries below the smallest normal double add at most M 2^-1022 to the bound).
    """
    from scipy import signal  # here: importing it costs about 0.9 s of a process's start-up

    bound = _fft_error_bound(a, b)
    if bound <= tolerance or _U_EXTENDED >= _U:
        return np.maximum(signal.fftconvolve(a, b), 0.0), bound
    wide = signal.fftconvolve(a.astype(np.longdouble), b.astype(np.longdouble))
    wide = np.maximum(wide, 0.0) * (1.0 + 2.0**-52)
    out = np.asarray(wide, dtype=np.float64)
    extended_bound = _fft_error_bound(a, b, _U_EXTENDED) + out.size * 2.0**-1022
    return out, up(extended_bound)


def _heavy(p: Vector) -> npt.NDArray[np.intp]:
    """Indices of the heavy points: every non-zero if there are at most ``HEAVY_POINTS`` of
    them, else the (at most ``HEAVY_POINTS``) largest masses of at least ``HEAVY_MASS``."""
    if np.count_nonzero(p) <= HEAVY_POINTS:
        return np.flatnonzero(p)
    if float(p.max()) < HEAVY_MASS:
        return np.flatnonzero(p[:0])
    top = np.argpartition(p, p.size - HEAVY_POINTS)[p.size - HEAVY_POINTS :]
    return np.sort(top[p[top] >= HEAVY_MASS])


def _shift_add(out: Vector, base: Vector, points: npt.NDArray[np.intp], weights: Vector) -> None:
    for j, w in zip(points.tolist(), weights.tolist(), strict=True):
        out[j : j + base.size] += w * base


def _convolve_arrays(a: Vector, b: Vector, tolerance: float = math.inf) -> tuple[Vector, float]:
    """(c, e): the linear convolution of non-negative ``a`` and ``b`` computed so that
    c >= a * b - (a deficit of L1 norm at most e), entries >= 0.

    The heavy points of each operand (``_heavy``) are convolved directly, as shifted copies:
    every output entry is then a sum of at most 2 ``HEAVY_POINTS`` + 1 non-negative products, a
    relative error covered by a multiplicative margin. The light remainders are convolved by FFT
    (``_fft_convolve``, whose error bound is proportional to their norms: an atom of mass 0.99,
    the subsampled Gaussian's "not sampled" loss, never enters the FFT).
    """
    ha, hb = _heavy(a), _heavy(b)
    if ha.size == 0 and hb.size == 0:
        return _fft_convolve(a, b, tolerance)
    out = np.zeros(a.size + b.size - 1)
    _shift_add(out, a, hb, b[hb])
    light_b = b
    if hb.size:
        light_b = np.array(b, dtype=np.float64, copy=True)
        light_b[hb] = 0.0
    _shift_add(out, light_b, ha, a[ha])
    out *= 1.0 + (2 * HEAVY_POINTS + 4) * _U
    light_a = a
    if ha.size:
        light_a = np.array(a, dtype=np.float64, copy=True)
        light_a[ha] = 0.0
    if not (light_a.any() and light_b.any()):
        return out, 0.0
    fft_part, error = _fft_convolve(light_a, light_b, tolerance)
    out += fft_part
    # the final addition of two non-negative vectors: one more rounding per entry
    out *= 1.0 + 2 * _U
    return out, error


def _up_positive(x: float) -> float:
    return x if x == 0.0 else up(x)


def _convolve(
    a: PldPmf,
    b: PldPmf,
    tolerance: float = math.inf,
    tails: tuple[float, float] = (LEFT_TAIL_MASS, RIGHT_TAIL_MASS),
) -> PldPmf:
    """Composition of two pmfs on the same grid (see the soundness invariant), trimmed with
    the (left, right) ``tails``; the FFT runs in long double when its double precision error
    bound would exceed ``tolerance``."""
    probs, error = _convolve_arrays(a.probs, b.probs, tolerance)
    ia, ib = a.infinity_mass, b.infinity_mass
    inf = _up_positive(_up_positive(ia + ib - ia * ib) + error)
    return PldPmf(a.lower + b.lower, probs, inf).trimmed(*tails)


def _power_of_two_ratio(coarse: float, fine: float) -> int:
    ratio = coarse / fine
    k = round(ratio)
    if k < 1 or k != ratio or k & (k - 1):
        raise ValueError(f"intervals {fine!r} and {coarse!r} are not related by a power of two")
    return int(k)


@dataclass(frozen=True, eq=False)
class Pld:
    """A pessimistic privacy loss distribution on the grid ``interval``: the "remove" pmf and,
    when the two directions differ, the "add" pmf (``None``: the same as "remove").

    ``extended``: compositions into it run their FFTs in long double (see ``state_for_budget``).
    """

    interval: float
    remove: PldPmf
    add: PldPmf | None = None
    extended: bool = False

    def __post_init__(self) -> None:
        d = float(self.interval)
        if not (math.isfinite(d) and d > 0.0):
            raise ValueError(f"interval must be finite and > 0, got {self.interval!r}")
        object.__setattr__(self, "interval", d)

    @classmethod
    def identity(cls, interval: float = BASE_INTERVAL, extended: bool = False) -> Pld:
        """The empty composition: loss 0 with probability 1."""
        return cls(interval, PldPmf(0, np.ones(1), 0.0), None, extended)

    @property
    def symmetric(self) -> bool:
        return self.add is None

    @property
    def add_pmf(self) -> PldPmf:
        return self.remove if self.add is None else self.add

    @property
    def size(self) -> int:
        """Grid points held (both directions)."""
        return self.remove.size + (0 if self.add is None else self.add.size)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Pld):
            return NotImplemented
        return (
            self.interval == other.interval
            and self.extended == other.extended
            and self.remove == other.remove
            and (self.add is None) == (other.add is None)
            and (self.add is None or self.add == other.add)
        )

    __hash__ = None  # type: ignore[assignment]

    def coarsened(self, factor: int) -> Pld:
        """The same PLD on a grid ``factor`` (a power of two) times coarser, losses rounded up."""
        if factor == 1:
            return self
        if factor < 1 or factor & (factor - 1):
            raise ValueError(f"factor must be a power of two, got {factor}")
        add = None if self.add is None else self.add.coarsened(factor)
        return Pld(self.interval * factor, self.remove.coarsened(factor), add, self.extended)

    def at_interval(self, interval: float) -> Pld:
        """This PLD on the grid ``interval`` (equal or coarser by a power of two)."""
        return self.coarsened(_power_of_two_ratio(interval, self.interval))

    def compose(self, other: Pld, work: PldWork | None = None) -> Pld:
        """The PLD of both mechanisms run one after the other (commutative up to rounding).

        Operands on different grids are brought to the coarser one; if the result could exceed
        ``MAX_SUPPORT`` points, both are first coarsened by factors of two until it cannot.
        FFTs run in double precision unless either operand is ``extended``. ``work``, when
        given, is charged ``composition_work`` first (``PldWorkExceeded`` beyond its limit).
        """
        return self._compose(other, 1, work)

    def composition_work(self, other: Pld, repeats: int = 1) -> int:
        """The work (``PldWork`` units) of ``compose`` with ``other`` (``_compose`` for
        ``repeats``), before it runs: the grid points of both operands in each direction,
        ``LONG_DOUBLE_WEIGHT`` each when the FFT may run in long double (an extended operand,
        or a squaring that ``self_compose`` repeats). An upper bound: operands are counted
        before any rebinning, which only shortens them."""
        a_add = self.add_pmf.size
        b_add = other.add_pmf.size
        points = self.remove.size + other.remove.size
        if not (self.add is None and other.add is None):
            points += a_add + b_add
        wide = self.extended or other.extended or repeats > 1
        return points * (LONG_DOUBLE_WEIGHT if wide else 1)

    def _compose(self, other: Pld, repeats: int, work: PldWork | None = None) -> Pld:
        """``compose`` for a result that will be repeated ``repeats`` times (``self_compose``):
        tail budgets are divided by ``repeats``, and for repeats > 1 the FFT runs in long double
        when its double precision bound exceeds SELF_COMPOSE_MARGIN / repeats."""
        if work is not None:
            work.charge(self.composition_work(other, repeats))
        a, b = self, other
        if a.interval < b.interval:
            a = a.at_interval(b.interval)
        elif b.interval < a.interval:
            b = b.at_interval(a.interval)
        while max(a.remove.size + b.remove.size, a.add_pmf.size + b.add_pmf.size) - 1 > MAX_SUPPORT:
            a, b = a.coarsened(2), b.coarsened(2)
        extended = a.extended or b.extended
        tol = 0.0 if extended else (math.inf if repeats == 1 else SELF_COMPOSE_MARGIN / repeats)
        tails = (LEFT_TAIL_MASS / repeats, RIGHT_TAIL_MASS / repeats)
        remove = _convolve(a.remove, b.remove, tol, tails)
        if a.add is None and b.add is None:
            return Pld(a.interval, remove, None, extended)
        return Pld(a.interval, remove, _convolve(a.add_pmf, b.add_pmf, tol, tails), extended)

    def self_compose(self, count: int, work: PldWork | None = None) -> Pld:
        """``count`` independent repetitions, by repeated squaring (about 2 log2(count)
        convolutions, each trimmed and bounded as in ``compose``).

        An error made in the power ``2^k`` is repeated in the result about ``count >> k``
        times, so that squaring gets tail budgets divided by ``count >> k`` and the FFT
        tolerance ``SELF_COMPOSE_MARGIN / (count >> k)``: the early, small, much repeated
        squarings run in long double, the late, large ones usually in double. The whole count
        then adds a few ``SELF_COMPOSE_MARGIN`` and ``RIGHT_TAIL_MASS`` to the infinity mass
        (double precision and full tails throughout: about count x 1e-12 for a DP-SGD step).

        ``work``, when given, is charged each convolution's ``composition_work`` before it runs
        (``PldWorkExceeded``, nothing more done, past its limit): a count of 10^9 is about 60
        convolutions of up to 2^20 points, 4-6 s of CPU.
        """
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(f"count must be an integer >= 1, got {count!r}")
        result: Pld | None = None
        base: Pld = self
        n = count
        while True:
            if n & 1:
                result = base if result is None else result._compose(base, 1, work)
            n >>= 1
            if not n:
                break
            base = base._compose(base, n, work)
        assert result is not None
        return result

    def delta(self, epsilon: float) -> float:
        """Upper bound on delta at ``epsilon`` (the larger of both directions)."""
        d = self.remove.delta(epsilon, self.interval)
        if self.add is not None:
            d = max(d, self.add.delta(epsilon, self.interval))
        return d

    def epsilon(self, delta: float) -> float:
        """Upper bound on the least epsilon with (epsilon, delta)-DP (inf if none is finite)."""
        e = self.remove.epsilon(delta, self.interval)
        if self.add is not None:
            e = max(e, self.add.epsilon(delta, self.interval))
        return e

    # --- serialisation ------------------------------------------------------------------

    def to_bytes(self) -> bytes:
        """Little-endian binary form, exact (see ``from_bytes``)::

        b"PLD" | format u8 = 1 | flags u8 (bit 0: add pmf present) | 3 pad bytes
        | interval f64
        | per pmf (remove, then add if present): lower i64 | n u64 | infinity_mass f64
          | n x f64 probabilities
        """
        pmfs = [self.remove] if self.add is None else [self.remove, self.add]
        flags = (0 if self.add is None else 1) | (2 if self.extended else 0)
        parts = [_HEADER.pack(_MAGIC, _FORMAT, flags, self.interval)]
        for pmf in pmfs:
            parts.append(_PMF_HEADER.pack(pmf.lower, pmf.size, pmf.infinity_mass))
            parts.append(np.ascontiguousarray(pmf.probs, dtype="<f8").tobytes())
        return b"".join(parts)

    @classmethod
    def from_bytes(cls, data: bytes) -> Pld:
        """Inverse of ``to_bytes``: ``Pld.from_bytes(p.to_bytes()) == p``; ``ValueError`` on
        anything else."""
        view = memoryview(data)
        if len(view) < _HEADER.size:
            raise ValueError("not a serialised PLD: too short")
        magic, fmt, flags, interval = _HEADER.unpack_from(view, 0)
        if magic != _MAGIC or fmt != _FORMAT or flags not in (0, 1, 2, 3):
            raise ValueError("not a serialised PLD (format 1)")
        offset = _HEADER.size
        pmfs: list[PldPmf] = []
        for _ in range(1 + (flags & 1)):
            if len(view) < offset + _PMF_HEADER.size:
                raise ValueError("serialised PLD is truncated")
            lower, n, inf = _PMF_HEADER.unpack_from(view, offset)
            offset += _PMF_HEADER.size
            end = offset + 8 * n
            if n < 1 or n > MAX_SUPPORT or len(view) < end:
                raise ValueError("serialised PLD has a bad length")
            probs = np.frombuffer(view[offset:end], dtype="<f8").astype(np.float64)
            pmfs.append(PldPmf(lower, probs, inf))
            offset = end
        if offset != len(view):
            raise ValueError("serialised PLD has trailing bytes")
        return cls(interval, pmfs[0], pmfs[1] if flags & 1 else None, bool(flags & 2))


_MAGIC = b"PLD"
_FORMAT = 1
_HEADER = struct.Struct("<3sBB3xd")
_PMF_HEADER = struct.Struct("<qQd")

__all__ = [
    "BASE_INTERVAL",
    "LONG_DOUBLE_WEIGHT",
    "PldWork",
    "PldWorkExceeded",
    "MAX_SUPPORT",
    "LEFT_TAIL_MASS",
    "RIGHT_TAIL_MASS",
    "SELF_COMPOSE_MARGIN",
    "Pld",
    "PldPmf",
    "interval_for_budget",
    "state_for_budget",
]
