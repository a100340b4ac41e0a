"""Mechanism parameters -> pessimistic privacy loss distribution (``Pld``), cached.

One function per kind, each with its neighbouring relation and parameter convention (the
same as ``mechanisms.py`` and docs/formulas.md section 1). ``count`` repetitions are composed by
``Pld.self_compose`` (Gaussians exactly, by scaling the sensitivity with sqrt(count)).

* Continuous additive-noise mechanisms (Gaussian, Laplace, Poisson-subsampled Gaussian) use
  dp_accounting's ``privacy_loss_distribution`` constructions with the pessimistic
  connect-the-dots discretisation [Doroshenko, Ghazi, Kamath, Kumar, Manurangsi 2022,
  arXiv 2207.04380]. Their floating-point error (about 1e-12 per grid point where delta is
  near 1) is dp_accounting's; it is not covered by a proven margin, and the tests check the
  results against exact values and dp_accounting's optimistic estimates.
* Mechanisms whose worst pair has finitely many loss values (k-ary randomized response,
  RAPPOR, discrete Laplace, any eps-DP or (eps, delta)-DP mechanism) split each loss atom
  between the grid points around it, preserving both its P-mass and its Q-mass: that is
  connect-the-dots for atoms (pessimistic: the hockey stick becomes the chord, in e^eps, of a
  convex curve) and it keeps a genuine pair, computed with a few ulps of relative error that
  a margin covers.
* The exponential mechanism uses the supremum of the hockey sticks of all eps-bounded-range
  pairs, a convex curve in e^eps, through connect-the-dots (``exponential``).

Each kind names its builder here in its own module (``KindSpec.pld``), or says why it has none:
``zcdp`` and ``rdp`` entries describe a mechanism by a divergence bound only, and no
distribution of the privacy loss follows from it. ``for_mechanism`` raises ``NoPldError`` for
such a kind, naming the accountings that accept it (``KindSpec.accountings``).

Constructions are cached per (kind, parameters, count, interval) in a byte-bounded LRU, so a
ledger of 1,000 entries with 20 distinct parameter sets costs 20 constructions.

**Work is counted, not timed** (``PldWork``). ``for_mechanism`` and ``compose_all`` take a
request's meter (``work``); every construction step is priced before it runs (dp_accounting's
constructions per grid point and direction, ``CONSTRUCTION_WEIGHT``; the discrete Laplace's per
unit of sensitivity, ``SENSITIVITY_WEIGHT``; atoms, ``ATOM_WEIGHT``; the bounded-range grid,
``BOUNDED_RANGE_WEIGHT``) and so is every convolution of ``count``'s self-composition
(``Pld.composition_work``), and the step that would pass the meter's limit raises
``PldWorkExceeded`` instead of running. A cached construction charges the work it took when
built, so whether a request fits does not depend on what the cache holds; a construction
refused for its work is remembered with the work it was shown to need, so a retry (the
charge's locked path after ``warm_pld``) is refused without redoing it. The services give
each request ``PLD_WORK_LIMIT``.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from app.accounting import registry
from app.accounting.kinds import KINDS, KindSpec
from app.accounting.pld import (
    BASE_INTERVAL,
    MAX_SUPPORT,
    Pld,
    PldPmf,
    PldWork,
    PldWorkExceeded,
)
from app.accounting.rounding import up

if TYPE_CHECKING:  # imported where used: dp_accounting.pld loads scipy.signal and scipy.stats
    # (about 1 s), which a process that builds no PLD (the command line, migrations, a server
    # with no pld dataset yet) need not pay at start-up
    from dp_accounting.pld import pld_pmf
    from dp_accounting.pld import privacy_loss_distribution as dpl

_U = 2.0**-53


class NoPldError(ValueError):
    """A mechanism kind that has no privacy loss distribution (only a divergence bound)."""

    def __init__(self, kind: str, accepted: tuple[str, ...], why: str) -> None:
        self.kind = kind
        self.accepted = tuple(a for a in accepted if a != "pld")
        names = " or ".join(repr(a) for a in self.accepted)
        super().__init__(
            f"a {kind!r} entry {why}: pld accounting cannot compose it; use accounting {names}"
        )


# --- helpers -----------------------------------------------------------------------------


def _down(x: float) -> float:
    return float(np.nextafter(x, -math.inf))


def _check(name: str, value: float, lo: float, hi: float, *, open_lo: bool = False) -> float:
    v = float(value)
    ok = math.isfinite(v) and (lo < v if open_lo else lo <= v) and v <= hi
    if not ok:
        raise ValueError(
            f"{name} must be in {'(' if open_lo else '['}{lo:g}, {hi:g}], got {value!r}"
        )
    return v


def _check_count(count: int) -> int:
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"count must be an integer >= 1, got {count!r}")
    return count


UNIT_MAX_SUPPORT = MAX_SUPPORT // 4
"""Most grid points one run's PLD is built on (2^18): dp_accounting evaluates the hockey stick
at each, so this bounds a construction's time (a few seconds) as well as its memory."""


def _unit_interval(span: float, interval: float) -> float:
    """``interval`` doubled until a support of ``span`` nats fits in ``UNIT_MAX_SUPPORT`` points."""
    while span / interval + 3.0 > UNIT_MAX_SUPPORT:
        interval *= 2.0
    return interval


UNIT_TAILS = (1e-16, 1e-18)
"""(left, right) tail budgets when trimming one run's PLD, which ``count`` may repeat many times."""


def _pmf(pmf: pld_pmf.PLDPmf) -> PldPmf:
    """dp_accounting's pmf as our ``PldPmf`` (its dense form: first loss index, masses)."""
    dense = pmf.to_dense_pmf()
    probs = np.maximum(np.asarray(dense._probs, dtype=np.float64), 0.0)  # noqa: SLF001
    return PldPmf(int(dense._lower_loss), probs, float(dense._infinity_mass))  # noqa: SLF001


def _from_dp_accounting(pld: dpl.PrivacyLossDistribution, interval: float) -> Pld:
    remove = _pmf(pld._pmf_remove).trimmed(*UNIT_TAILS)  # noqa: SLF001
    if pld._symmetric:  # noqa: SLF001
        return Pld(interval, remove)
    return Pld(interval, remove, _pmf(pld._pmf_add).trimmed(*UNIT_TAILS))  # noqa: SLF001


def _atoms_pmf(
    losses: list[float], masses: list[float], infinity_mass: float, interval: float
) -> PldPmf:
    """Connect-the-dots for finitely many loss atoms: the P-mass p of an atom at loss l, with
    g_lo <= l <= g_hi the grid points around it, goes to g_lo and g_hi in the shares that keep
    both its P-mass and its Q-mass p e^{-l}:

        at g_hi: p (1 - e^{-(l - g_lo)}) / (1 - e^{-D}),
        at g_lo: p e^{-D} (e^{g_hi - l} - 1) / (1 - e^{-D}),

    D = g_hi - g_lo. The result is the loss distribution of a genuine pair whose hockey stick
    is, between grid points, the chord (in e^eps) of the true convex one: it dominates.
    Losses are moved 2 ulps up first (a computed loss value is never below the true one); every
    share is computed with a few ulps of relative error, which a 32-ulp margin covers.
    """
    points: dict[int, float] = {}
    for value, mass in zip(losses, masses, strict=True):
        if mass <= 0.0:
            continue
        loss = value + abs(value) * 2.0**-51  # 2 ulps up: a computed loss is never too low
        k = math.floor(loss / interval)
        while k * interval > loss:
            k -= 1
        while (k + 1) * interval < loss:
            k += 1
        g_lo, g_hi = k * interval, (k + 1) * interval
        if g_lo == loss:
            points[k] = points.get(k, 0.0) + mass
            continue
        gap = g_hi - g_lo
        denom = -math.expm1(-gap)
        hi_share = mass * -math.expm1(-(loss - g_lo)) / denom
        lo_share = mass * math.exp(-gap) * math.expm1(g_hi - loss) / denom
        points[k + 1] = points.get(k + 1, 0.0) + hi_share
        points[k] = points.get(k, 0.0) + lo_share
    if not points:  # everything at +infinity (approx_dp with delta = 1)
        return PldPmf(0, np.zeros(1), infinity_mass)
    lower, upper = min(points), max(points)
    probs = np.zeros(upper - lower + 1)
    for k, v in points.items():
        probs[k - lower] = v
    return PldPmf(lower, probs * (1.0 + 32 * _U), up(infinity_mass))


# --- work -------------------------------------------------------------------------------

PLD_WORK_LIMIT = 40_000_000
"""Most ``PldWork`` units one request may spend building privacy loss distributions (a
compose with ``accounting: "pld"``, a charge, dry run, dp_event or reservation on a ``pld``
dataset, a calibration on one): 1.3-1.8 s of CPU at the worst accepted case per family
(``bench/pld.py work``, 2-core machine). Sized to keep the DP-SGD runs ``pld`` datasets are
recommended for (sigma 0.6 at q = 0.01 and 500 steps, 1.5 s; sigma 0.8 at q = 0.02 and 10,000
steps, 2.0 s unmetered): 7.5e6 (0.58 s) refused them. Before, nothing bounded ``count`` or
DP-SGD steps here: one Laplace entry with count 10^9 took 4.5 s (about 60 FFT convolutions of
up to 2^20 points). The composition of one entry into a dataset's stored state is outside it:
at most one convolution per direction, bounded by ``MAX_SUPPORT``."""

CONSTRUCTION_WEIGHT = 16
"""Work units per grid point and direction of a dp_accounting construction (Gaussian, Laplace,
Poisson-subsampled Gaussian, discrete Laplace above ``MAX_ATOMS``): it evaluates the hockey
stick at each point, 750 ns to 1 us (the subsampled Gaussian's, both directions on 2^18 points,
0.4-0.5 s), against 65 ns per point of a double-precision FFT. At 12 the worst accepted case,
12 steps of sigma 0.999 and sample rate 0.5, took 0.67 s."""

SUBSAMPLED_CONSTRUCTION_WEIGHT = 24
"""``CONSTRUCTION_WEIGHT`` for the Poisson-subsampled Gaussian, whose privacy loss at each point
is a log-sum of two Gaussians: 1.25-2 us per point and direction (at 16, 7 steps of sigma
0.999 and sample rate 0.5 were accepted at 6.4 million units and took 0.59 s; at 24, 5 steps
at 7.5 million took 0.58 s, the worst accepted case; at 32, 3 steps took 0.51 s, but 100 steps
of sigma 1 and sample rate 0.01, which a dataset's PLD admits where its RDP bound does not,
were refused)."""

SENSITIVITY_WEIGHT = 7
"""Work units per unit of sensitivity of dp_accounting's discrete Laplace construction (linear in
it: 0.44 s at 10^6, a calibration's candidates 4.6 s in all before they were counted)."""

ATOM_WEIGHT = 12
"""Work units per loss atom split onto the grid (a Python loop, about 0.7 us per atom)."""

BOUNDED_RANGE_WEIGHT = 4
"""Work units per grid point of the exponential mechanism's bounded-range construction (numpy
and dp_accounting's connect-the-dots, about 250 ns per point)."""

REFUSED_KEPT = 4096
"""Constructions refused for their work remembered (most recent), with the work they need."""

_METER: ContextVar[PldWork | None] = ContextVar("pld_work", default=None)


def _charge(units: float) -> None:
    """Count ``units`` of construction work on the request's meter (if any), before doing it."""
    meter = _METER.get()
    if meter is not None:
        meter.charge(units)


@contextmanager
def _metered(work: PldWork | None) -> Iterator[None]:
    """Constructions inside charge ``work`` (the meter already in force when None)."""
    if work is None:
        yield
        return
    token = _METER.set(work)
    try:
        yield
    finally:
        _METER.reset(token)


def _grid_points(span: float, interval: float) -> int:
    """Grid points of a construction spanning ``span`` nats on ``interval`` (as dp_accounting
    lays them out, plus its end points)."""
    return int(min(span / interval + 3.0, float(UNIT_MAX_SUPPORT) + 3.0))


# --- cache -------------------------------------------------------------------------------

CACHE_BYTES = 256 * 2**20
"""Most bytes of probability arrays the construction cache keeps (least recently used out)."""


@dataclass(frozen=True)
class CacheInfo:
    hits: int
    misses: int
    entries: int
    bytes: int


class _Cache:
    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._data: OrderedDict[tuple[Any, ...], tuple[Pld, float]] = OrderedDict()
        self._refused: OrderedDict[tuple[Any, ...], float] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get_or_build(self, key: tuple[Any, ...], build: Callable[[], Pld]) -> Pld:
        """The cached value of ``key``, or ``build()``'s. Either way the request's meter is
        charged the work the construction takes from nothing (a hit: what it took when built),
        and a construction known to need more than the meter has left is refused at once."""
        meter = _METER.get()
        with self._lock:
            hit = self._data.get(key)
            if hit is not None:
                self._data.move_to_end(key)
            needs = self._refused.get(key)
        if hit is not None:
            if meter is not None:
                meter.charge(hit[1])
            with self._lock:
                self.hits += 1
            return hit[0]
        if meter is not None and needs is not None and needs > meter.remaining:
            raise PldWorkExceeded(meter.spent + needs, meter.limit)
        with self._lock:
            self.misses += 1
        own = meter if meter is not None else PldWork()  # counted even with no limit
        start = own.spent
        try:
            with _metered(own if meter is None else None):
                value = build()  # outside the lock: constructions may take a while
        except PldWorkExceeded as exc:
            with self._lock:
                self.misses -= 1  # refused before it was built: no construction
                self._refused[key] = max(self._refused.get(key, 0.0), exc.needed - start)
                self._refused.move_to_end(key)
                while len(self._refused) > REFUSED_KEPT:
                    self._refused.popitem(last=False)
            raise
        work = own.spent - start
        size = 8 * value.size
        with self._lock:
            if key not in self._data and size <= self.max_bytes:
                self._data[key] = (value, work)
                self._bytes += size
                self._evict()
        return value

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
            self._refused.clear()
            self._bytes = 0
            self.hits = self.misses = 0

    def limit(self, max_bytes: int) -> None:
        with self._lock:
            self.max_bytes = max_bytes
            self._evict()

    def _evict(self) -> None:
        """Drop the least recently used entries until the cache fits (the lock held)."""
        while self._bytes > self.max_bytes:
            _, (old, _work) = self._data.popitem(last=False)
            self._bytes -= 8 * old.size

    def info(self) -> CacheInfo:
        with self._lock:
            return CacheInfo(self.hits, self.misses, len(self._data), self._bytes)


_CACHE = _Cache(CACHE_BYTES)


def cache_info() -> CacheInfo:
    """Hits, misses (= constructions), entries and bytes of the construction cache."""
    return _CACHE.info()


def clear_cache() -> None:
    """Empty the construction cache and reset its counters."""
    _CACHE.clear()


def set_cache_limit(max_bytes: int) -> None:
    """Keep at most ``max_bytes`` of probability arrays in the construction cache (the least
    recently used dropped now if it holds more; 0: nothing kept, every PLD built when asked)."""
    if max_bytes < 0:
        raise ValueError(f"the cache limit must be at least 0 bytes, got {max_bytes}")
    _CACHE.limit(max_bytes)


def _cached(key: tuple[Any, ...], count: int, unit: Callable[[], Pld]) -> Pld:
    """The PLD of ``count`` repetitions of the mechanism whose one-run PLD ``unit`` builds."""
    if count == 1:
        return _CACHE.get_or_build(key + (1,), unit)
    return _CACHE.get_or_build(
        key + (count,),
        lambda: _CACHE.get_or_build(key + (1,), unit).self_compose(count, _METER.get()),
    )


# --- additive noise (dp_accounting constructions) ------------------------------------------

MIN_SIGMA_RATIO = 1e-4
"""Smallest sigma / sensitivity accepted (the loss then spans about 2e8 nats). Below it the grid
interval that fits the span in ``UNIT_MAX_SUPPORT`` points passes 700 nats and dp_accounting's
construction overflows (``math.expm1`` of the interval: an OverflowError, a 500, at 1/20,000);
and such a Gaussian is past every budget: its epsilon at any delta < 1 is above 4e7, the largest
budget epsilon 1e6."""


def gaussian(
    sigma: float, sensitivity: float = 1.0, count: int = 1, *, interval: float = BASE_INTERVAL
) -> Pld:
    """Gaussian mechanism f(x) + N(0, sigma^2 I), L2 sensitivity ``sensitivity`` under the
    caller's neighbouring relation (symmetric PLD). ``count`` repetitions are exactly one
    Gaussian with sensitivity * sqrt(count) (docs/formulas.md §2.3), rounded up."""
    from dp_accounting.pld import privacy_loss_distribution as dpl
    from dp_accounting.pld import privacy_loss_mechanism as plm

    sigma = _check("sigma", sigma, 0.0, math.inf, open_lo=True)
    sens = _check("sensitivity", sensitivity, 0.0, math.inf, open_lo=True)
    count = _check_count(count)
    sens_total = up(up(sens * up(math.sqrt(count))))
    if sens_total / sigma > 1.0 / MIN_SIGMA_RATIO:
        raise ValueError(
            f"sensitivity / sigma above {1 / MIN_SIGMA_RATIO:g} has no useful PLD (its epsilon "
            "at any delta is above 4e7, past every budget)"
        )
    bounds = plm.GaussianPrivacyLoss(sigma, sensitivity=sens_total).connect_dots_bounds()
    d = _unit_interval(float(bounds.epsilon_upper - bounds.epsilon_lower), interval)

    span = float(bounds.epsilon_upper - bounds.epsilon_lower)

    def build() -> Pld:
        _charge(CONSTRUCTION_WEIGHT * _grid_points(span, d))
        return _from_dp_accounting(
            dpl.from_gaussian_mechanism(sigma, sens_total, value_discretization_interval=d), d
        )

    return _CACHE.get_or_build(("gaussian", sigma, sens_total, d), build)


def subsampled_gaussian(
    sigma: float,
    sensitivity: float = 1.0,
    sample_rate: float = 1.0,
    steps: int = 1,
    count: int = 1,
    *,
    interval: float = BASE_INTERVAL,
) -> Pld:
    """Poisson-subsampled Gaussian (DP-SGD): ``steps`` x ``count`` steps, each including every
    record with probability ``sample_rate`` and adding N(0, sigma^2) to a sum of contributions
    clipped to L2 norm ``sensitivity`` (noise multiplier sigma / sensitivity). Neighbours: add
    or remove one record; the PLD keeps both directions. Sample rate 1 is a plain Gaussian."""
    from dp_accounting.pld import privacy_loss_distribution as dpl
    from dp_accounting.pld import privacy_loss_mechanism as plm

    sigma = _check("sigma", sigma, 0.0, math.inf, open_lo=True)
    sens = _check("sensitivity", sensitivity, 0.0, math.inf, open_lo=True)
    q = _check("sample_rate", sample_rate, 0.0, 1.0, open_lo=True)
    total = _check_count(steps) * _check_count(count)
    if q == 1.0:
        return gaussian(sigma, sens, total, interval=interval)
    span = 0.0
    for adjacency in (plm.AdjacencyType.ADD, plm.AdjacencyType.REMOVE):
        b = plm.GaussianPrivacyLoss(
            sigma, sensitivity=sens, sampling_prob=q, adjacency_type=adjacency
        ).connect_dots_bounds()
        span = max(span, float(b.epsilon_upper - b.epsilon_lower))
    d = _unit_interval(span, interval)

    def unit() -> Pld:
        _charge(2 * SUBSAMPLED_CONSTRUCTION_WEIGHT * _grid_points(span, d))  # both directions
        return _from_dp_accounting(
            dpl.from_gaussian_mechanism(
                sigma, sens, value_discretization_interval=d, sampling_prob=q
            ),
            d,
        )

    return _cached(("subsampled_gaussian", sigma, sens, q, d), total, unit)


def laplace(epsilon: float, count: int = 1, *, interval: float = BASE_INTERVAL) -> Pld:
    """Laplace mechanism with epsilon = L1 sensitivity / scale (caller's relation; symmetric).
    dp_accounting's parameter is the scale for sensitivity 1, rounded down (more loss)."""
    from dp_accounting.pld import privacy_loss_distribution as dpl

    eps = _check("epsilon", epsilon, 0.0, math.inf, open_lo=True)
    count = _check_count(count)
    scale = _down(1.0 / eps)
    d = _unit_interval(2.0 / scale, interval)

    def unit() -> Pld:
        _charge(CONSTRUCTION_WEIGHT * _grid_points(2.0 / scale, d))
        return _from_dp_accounting(
            dpl.from_laplace_mechanism(scale, 1.0, value_discretization_interval=d), d
        )

    return _cached(("laplace", scale, d), count, unit)


MAX_ATOMS = 10_000
"""Discrete Laplace with a larger sensitivity uses dp_accounting's construction instead of atoms."""

MAX_DP_ACCOUNTING_SENSITIVITY = 1_000_000
"""Discrete Laplace with a larger sensitivity is composed as the worst epsilon-DP pair
(``pure_dp``, binary randomized response): dp_accounting's construction costs about 0.5 us of
CPU per unit of sensitivity (0.5 s here, once per parameter set: constructions are cached).
Looser: 100 charges at epsilon 1 come to 83.5 instead of 71.5 at delta 1e-6."""


def discrete_laplace(
    epsilon: float, sensitivity: int = 1, count: int = 1, *, interval: float = BASE_INTERVAL
) -> Pld:
    """Discrete Laplace on Z, Pr[Z = z] = tanh(t/2) e^{-t |z|}, t = epsilon / Delta (rounded up),
    integer L1 sensitivity Delta, worst pair shifted by Delta (docs/formulas.md §1.3; symmetric).

    The loss t(|o - Delta| - |o|) takes Delta + 1 values: t Delta w.p. 1 / (1 + e^-t) (o <= 0),
    t (Delta - 2 o) w.p. tanh(t/2) e^{-t o} (0 < o < Delta), -t Delta w.p.
    e^{-t Delta} / (1 + e^-t) (o >= Delta); they are split onto the grid like any atoms.
    """
    from dp_accounting.pld import privacy_loss_distribution as dpl

    eps = _check("epsilon", epsilon, 0.0, 700.0, open_lo=True)
    if isinstance(sensitivity, bool) or not isinstance(sensitivity, int) or sensitivity < 1:
        raise ValueError(f"sensitivity must be an integer >= 1, got {sensitivity!r}")
    count = _check_count(count)
    t = up(eps / sensitivity)
    if sensitivity > MAX_DP_ACCOUNTING_SENSITIVITY:
        # dp_accounting's construction is linear in the sensitivity (0.5 s at 10^6, minutes at
        # 10^9, under the dataset's lock): the mechanism is (t Delta)-DP, and binary randomized
        # response at that epsilon dominates every such pair (``pure_dp``): sound, looser
        return pure_dp(up(t * sensitivity), count, interval=interval)
    if sensitivity > MAX_ATOMS:
        d = _unit_interval(2.0 * t * sensitivity, interval)

        def unit() -> Pld:
            _charge(
                SENSITIVITY_WEIGHT * sensitivity
                + CONSTRUCTION_WEIGHT * _grid_points(2.0 * t * sensitivity, d)
            )
            return _from_dp_accounting(
                dpl.from_discrete_laplace_mechanism(
                    t, sensitivity, value_discretization_interval=d, use_connect_dots=True
                ),
                d,
            )

        return _cached(("discrete_laplace", t, sensitivity, d), count, unit)
    # the atoms are listed before the cache is asked: priced here (about 10 ms at MAX_ATOMS)
    _charge(ATOM_WEIGHT * (sensitivity + 1))
    inner = np.arange(1, sensitivity, dtype=np.float64)
    losses = [t * sensitivity, *(t * (sensitivity - 2.0 * inner)).tolist(), -t * sensitivity]
    tail = 1.0 / (1.0 + math.exp(-t))
    masses = [
        tail,
        *(math.tanh(t / 2.0) * np.exp(-t * inner)).tolist(),
        math.exp(-t * sensitivity) * tail,
    ]
    return _atoms_pld(("discrete_laplace", t, sensitivity), losses, masses, 0.0, count, interval)


# --- finitely many loss values -----------------------------------------------------------


def _atoms_pld(
    key: tuple[Any, ...],
    losses: list[float],
    masses: list[float],
    infinity_mass: float,
    count: int,
    interval: float,
) -> Pld:
    span = max(losses) - min(losses)
    d = _unit_interval(span, interval)

    def unit() -> Pld:
        _charge(ATOM_WEIGHT * len(losses))
        return Pld(d, _atoms_pmf(losses, masses, infinity_mass, d))

    return _cached(key + (d,), count, unit)


def randomized_response(
    epsilon: float, k: int = 2, count: int = 1, *, interval: float = BASE_INTERVAL
) -> Pld:
    """k-ary randomized response: the true value w.p. e^eps / (e^eps + k - 1), each other w.p.
    1 / (e^eps + k - 1). Neighbours: the single input changes (replace-one, docs/formulas.md §1.5).
    Loss +eps, -eps, 0 with those probabilities (symmetric)."""
    eps = _check("epsilon", epsilon, 0.0, 700.0, open_lo=True)
    if isinstance(k, bool) or not isinstance(k, int) or k < 2:
        raise ValueError(f"k must be an integer >= 2, got {k!r}")
    count = _check_count(count)
    denom = math.exp(eps) + (k - 1)
    keep = 1.0 / (1.0 + (k - 1) * math.exp(-eps))
    return _atoms_pld(
        ("randomized_response", eps, k),
        [eps, -eps, 0.0],
        [keep, 1.0 / denom, (k - 2) / denom],
        0.0,
        count,
        interval,
    )


def rappor(epsilon: float, count: int = 1, *, interval: float = BASE_INTERVAL) -> Pld:
    """Basic one-time RAPPOR, ``epsilon`` the total for one user's value change (two bits
    differ, each kept w.p. e^{eps/2} / (1 + e^{eps/2}); docs/formulas.md §1.6): two binary
    randomized responses at eps / 2, composed exactly (loss eps, 0, -eps)."""
    eps = _check("epsilon", epsilon, 0.0, 700.0, open_lo=True)
    count = _check_count(count)
    p = 1.0 / (1.0 + math.exp(-eps / 2.0))
    q = 1.0 / (1.0 + math.exp(eps / 2.0))
    return _atoms_pld(
        ("rappor", eps), [eps, 0.0, -eps], [p * p, 2.0 * p * q, q * q], 0.0, count, interval
    )


def approx_dp(
    epsilon: float, delta: float, count: int = 1, *, interval: float = BASE_INTERVAL
) -> Pld:
    """Any (epsilon, delta)-DP mechanism, by the pair that dominates all of them [Kairouz, Oh,
    Viswanath 2015; dp_accounting ``from_privacy_parameters``]: loss +inf w.p. delta, +eps w.p.
    (1 - delta) / (1 + e^-eps), -eps w.p. (1 - delta) / (1 + e^eps) (symmetric)."""
    eps = _check("epsilon", epsilon, 0.0, 700.0)
    dlt = _check("delta", delta, 0.0, 1.0)
    count = _check_count(count)
    rest = 1.0 - dlt
    if eps == 0.0:
        return _atoms_pld(("approx_dp", 0.0, dlt), [0.0], [rest], dlt, count, interval)
    return _atoms_pld(
        ("approx_dp", eps, dlt),
        [eps, -eps],
        [rest / (1.0 + math.exp(-eps)), rest / (1.0 + math.exp(eps))],
        dlt,
        count,
        interval,
    )


def pure_dp(epsilon: float, count: int = 1, *, interval: float = BASE_INTERVAL) -> Pld:
    """Any epsilon-DP mechanism: binary randomized response with parameter epsilon, which
    dominates every epsilon-DP pair [Kairouz, Oh, Viswanath 2015] (= ``approx_dp(eps, 0)``)."""
    return approx_dp(epsilon, 0.0, count, interval=interval)


# --- exponential mechanism (bounded range) -------------------------------------------------


def bounded_range_delta(eta: float, epsilon: np.ndarray) -> np.ndarray:
    """sup over eta-bounded-range pairs of the hockey stick at ``epsilon`` (vectorised).

    A pair is eta-BR if its privacy loss lies in [t, t + eta] (t in [-eta, 0], so that the
    Q-mass can be 1) [Rogers, Steinke 2021, Def. 1]. For fixed t, E_P[(1 - e^eps e^{-L})_+] is
    convex in u = e^{-L} and E_P[u] = 1, so the two-point pair with losses t and t + eta is
    worst; its P-mass at t + eta is a = (1 - e^t) / (1 - e^{-eta}). Then
    H_t(eps) = 1 - e^eps for eps < t, and a (1 - e^{eps - t - eta}) for t <= eps < t + eta,
    concave in e^t with maximiser t* = (eps - eta) / 2. Hence

        delta(eps) = 1 - e^eps                           for eps < -eta,
                   = max(1 - e^eps, B(eps))              for -eta <= eps < 0,
                   = B(eps)                              for 0 <= eps < eta,
                   = 0                                   for eps >= eta,
        B(eps) = (1 - e^{(eps - eta)/2})^2 / (1 - e^{-eta}).

    (At eps = 0 this is tanh(eta / 4), against tanh(eta / 2) for eta-DP.) A supremum of convex
    functions of e^eps is convex, so connect-the-dots on it gives a dominating PLD.
    """
    e = np.asarray(epsilon, dtype=np.float64)
    br = np.expm1((e - eta) / 2.0) ** 2 / -math.expm1(-eta)
    left = -np.expm1(e)
    out = np.where(e >= eta, 0.0, np.where(e >= 0.0, br, np.maximum(left, br)))
    return np.where(e < -eta, left, out)


def exponential(epsilon: float, count: int = 1, *, interval: float = BASE_INTERVAL) -> Pld:
    """Exponential mechanism Pr[y] proportional to exp(-eps loss(y, x) / (2 Delta)): eps-DP and
    eps-bounded range [Rogers, Steinke 2021, Lemma 3], so its PLD is dominated by the
    connect-the-dots PLD of ``bounded_range_delta(eps, .)`` on the grid from floor(-eps/d) to
    ceil(eps/d) (dp_accounting ``create_pmf_pessimistic_connect_dots_fixed_gap``). Never looser
    than ``pure_dp(eps)``, whose worst pair has losses +-eps (range 2 eps)."""
    from dp_accounting.pld import pld_pmf

    eta = _check("epsilon", epsilon, 0.0, 700.0, open_lo=True)
    count = _check_count(count)
    d = _unit_interval(2.0 * eta, interval)

    def unit() -> Pld:
        _charge(BOUNDED_RANGE_WEIGHT * _grid_points(2.0 * eta, d))
        lo, hi = math.floor(-eta / d) - 1, math.ceil(eta / d) + 1
        grid = np.arange(lo, hi + 1, dtype=np.float64) * d
        deltas = np.minimum(1.0, bounded_range_delta(eta, grid) * (1.0 + 64 * _U))
        deltas = np.minimum.accumulate(deltas)
        pmf = pld_pmf.create_pmf_pessimistic_connect_dots_fixed_gap(d, lo, hi, deltas)
        return Pld(d, _pmf(pmf).trimmed(*UNIT_TAILS))

    return _cached(("exponential", eta, d), count, unit)


# --- dispatch ----------------------------------------------------------------------------


def laplace_fields(*, interval: float = BASE_INTERVAL, **fields: Any) -> Pld:
    """``laplace`` from the Laplace kind's wire fields: ``epsilon``, or ``scale`` (+
    ``sensitivity``, default 1), whose epsilon = sensitivity / scale is rounded up."""
    params = dict(fields)
    count = params.pop("count", 1)
    if "scale" in params:
        scale = _check("scale", params.pop("scale"), 0.0, math.inf, open_lo=True)
        sens = _check("sensitivity", params.pop("sensitivity", 1.0), 0.0, math.inf, open_lo=True)
        eps = up(sens / scale)
    else:
        eps = params.pop("epsilon")
    if params:
        raise ValueError(f"laplace: unexpected fields {sorted(params)}")
    return laplace(eps, count, interval=interval)


def _builder_named(spec: KindSpec) -> Callable[..., Pld] | None:
    """The PLD builder ``spec`` names (``KindSpec.pld``), None when it has none; TypeError for
    a name this module does not define."""
    if spec.pld is None:
        return None
    builder = globals().get(spec.pld)
    if not callable(builder) or spec.pld.startswith("_"):
        raise TypeError(
            f"kind {spec.name!r} names PLD builder {spec.pld!r}, which {__name__} does not define"
        )
    return cast(Callable[..., Pld], builder)


_BUILDERS: dict[str, Callable[..., Pld]] = {
    name: b for name, b in ((n, _builder_named(s)) for n, s in KINDS.items()) if b is not None
}
"""Each kind's PLD builder, as its module names it (``KindSpec.pld``)."""

PLD_KINDS = frozenset(_BUILDERS)
"""Every kind with a PLD."""

NO_PLD_KINDS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {name: s.accountings for name, s in KINDS.items() if s.pld is None}
)
"""Kinds without a PLD, and the accountings that accept them (``KindSpec.accountings``)."""


def _no_pld(spec: KindSpec) -> NoPldError:
    return NoPldError(spec.name, spec.accountings, spec.no_pld)


def _spec(kind: object) -> KindSpec:
    """The declaration of ``kind`` (ValueError naming the known kinds otherwise)."""
    if not isinstance(kind, str):
        raise ValueError(f"unknown mechanism {kind!r}; known: {', '.join(registry.kind_names())}")
    return registry.spec(kind)


def builder(kind: str) -> Callable[..., Pld]:
    """The PLD builder of ``kind`` (called with its wire fields and ``interval``): ``NoPldError``
    for a kind without one, ``ValueError`` for an unknown kind."""
    s = _spec(kind)
    # (a kind declared outside the package's discovery, as tests do, is looked up by its name)
    found = _BUILDERS.get(s.name) if KINDS.get(s.name) is s else _builder_named(s)
    if found is None:
        raise _no_pld(s)
    return found


def describe(data: Mapping[str, Any]) -> str:
    """A mechanism object as an error names it: its kind, and its count and steps if above 1."""
    parts = [repr(data.get("mechanism"))]
    for name in ("count", "steps"):
        value = data.get(name, 1)
        if value != 1:
            parts.append(f"{name} {value}")
    return "entry " + ", ".join(parts)


def for_mechanism(
    data: Mapping[str, Any], *, interval: float = BASE_INTERVAL, work: PldWork | None = None
) -> Pld:
    """The PLD of a mechanism object as on the wire (``{"mechanism": kind, ...params,
    "count": n}``; a ``"v"`` version field is ignored). ``NoPldError`` for a kind without one
    (zcdp, rdp), ``ValueError`` for unknown kinds or fields, and for parameters whose loss
    overflows; ``PldWorkExceeded`` (naming the entry) when building it would take ``work`` (a
    request's meter; None: counted, not limited) past its limit, before that step runs."""
    params = dict(data)
    params.pop("v", None)
    kind = params.pop("mechanism", None)
    build = builder(_spec(kind).name)
    try:
        with _metered(work):
            return build(**params, interval=interval)
    except PldWorkExceeded as exc:
        raise PldWorkExceeded(exc.needed, exc.limit, describe(data)) from None
    except TypeError as exc:
        raise ValueError(f"{kind}: {exc}") from None
    except ArithmeticError as exc:  # a construction's float overflow: a 422, never a 500
        raise ValueError(
            f"{kind}: the privacy loss of these parameters is beyond what a privacy loss "
            f"distribution can represent ({exc})"
        ) from None


MAX_DISTINCT = 8
"""Most distinct mechanisms (every field but ``count``) one request composes as privacy loss
distributions, counting a Poisson-subsampled Gaussian as ``SUBSAMPLED_WEIGHT``: a construction
costs up to about a second of CPU (a DP-SGD one several), so a request's work is bounded by
counting them (422 beyond)."""

SUBSAMPLED_WEIGHT = 4
"""What a Poisson-subsampled Gaussian (sample rate below 1) counts toward ``MAX_DISTINCT``: its
PLD (both adjacency directions on up to 2^18 grid points, then self-composed over its steps) took
0.6 s of CPU for one step and 2.5-4.3 s for 1,000 to 100,000 steps on a loaded 2-core machine,
where eight of them in one request took 6.5 s idle (a helper's search). So at most two per
request (with up to four other distinct mechanisms)."""


def construction_weight(entry: Mapping[str, Any]) -> int:
    """What the PLD of mechanism object ``entry`` counts toward ``MAX_DISTINCT``."""
    if entry.get("mechanism") == "subsampled_gaussian" and entry.get("sample_rate", 1.0) != 1.0:
        return SUBSAMPLED_WEIGHT
    return 1


def too_many_distinct(entries: Sequence[Mapping[str, Any]]) -> str | None:
    """Why the distinct mechanism objects ``entries`` are too many for one request (None when
    they are not)."""
    weight = sum(construction_weight(e) for e in entries)
    if weight <= MAX_DISTINCT:
        return None
    return (
        f"pld accounting composes at most {MAX_DISTINCT} distinct mechanisms in one request, "
        f"a Poisson-subsampled Gaussian counting as {SUBSAMPLED_WEIGHT} (each distribution "
        f"costs up to about a second of CPU to build, a DP-SGD one several), got {len(entries)} "
        f"counting {weight}: send them in parts, or use accounting 'rdp'"
    )


def check_kinds(entries: Sequence[Mapping[str, Any]]) -> None:
    """``NoPldError`` for the first entry of a kind without a PLD, before anything is built (a
    compose of a costly RAPPOR and a zcdp entry built the first for 1.8 s, then answered 422)."""
    for entry in entries:
        try:
            s = _spec(entry.get("mechanism"))
        except ValueError:
            continue  # (unknown kinds are refused where they are built)
        if s.pld is None:
            raise _no_pld(s)


def compose_all(
    entries: Sequence[Mapping[str, Any]],
    *,
    interval: float = BASE_INTERVAL,
    work: PldWork | None = None,
) -> Pld:
    """The PLD of a fixed list of mechanism objects (the stateless compose endpoint): identical
    mechanisms (every field but ``count``) composed once with their counts added (repeated
    squaring, not one convolution per entry: 1,000 equal Gaussians took 5 s), in the order of
    their first appearance; at most ``MAX_DISTINCT`` distinct ones (ValueError). ``work``: the
    request's meter, charged for every construction and composition (``PldWorkExceeded``
    before the step that would pass its limit)."""
    for entry in entries:
        _check_count(entry.get("count", 1))
    groups = registry.merge_counts(entries)
    if (why := too_many_distinct(groups)) is not None:
        raise ValueError(why)
    check_kinds(groups)
    total = Pld.identity(interval)
    for entry in groups:
        total = total.compose(for_mechanism(entry, interval=total.interval, work=work), work)
    return total


__all__ = [
    "ATOM_WEIGHT",
    "BOUNDED_RANGE_WEIGHT",
    "CACHE_BYTES",
    "CONSTRUCTION_WEIGHT",
    "MAX_DISTINCT",
    "PLD_WORK_LIMIT",
    "SENSITIVITY_WEIGHT",
    "SUBSAMPLED_CONSTRUCTION_WEIGHT",
    "PldWork",
    "PldWorkExceeded",
    "describe",
    "NO_PLD_KINDS",
    "PLD_KINDS",
    "SUBSAMPLED_WEIGHT",
    "CacheInfo",
    "NoPldError",
    "approx_dp",
    "bounded_range_delta",
    "builder",
    "check_kinds",
    "construction_weight",
    "cache_info",
    "clear_cache",
    "set_cache_limit",
    "compose_all",
    "discrete_laplace",
    "exponential",
    "for_mechanism",
    "gaussian",
    "laplace",
    "laplace_fields",
    "pure_dp",
    "randomized_response",
    "rappor",
    "subsampled_gaussian",
    "too_many_distinct",
]
