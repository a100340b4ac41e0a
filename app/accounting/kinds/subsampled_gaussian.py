"""``subsampled_gaussian``: DP-SGD, Poisson-subsampled Gaussian steps."""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from app.accounting.closed_forms import gaussian_rho_up
from app.accounting.curve import PrivacyCurve, Vector
from app.accounting.kinds._events import (
    COMPOSED,
    MAX_EVENT_COUNT,
    MAX_EVENT_DEPTH,
    SELF_COMPOSED,
    DpEventError,
    at,
    join,
    number,
    only,
)
from app.accounting.kinds._spec import (
    MAX_COUNT,
    MAX_SCALE,
    MIN_SCALE,
    KindSpec,
    Mechanism,
    NextQuery,
    Translate,
    UnitCurves,
    check_event_fields,
    event_number,
    finish,
    param,
)
from app.accounting.orders import ORDERS
from app.accounting.subsampled_gaussian import Mask, rdp_batch

MIN_NOISE_MULTIPLIER, MAX_NOISE_MULTIPLIER = 1e-3, 1e6


MAX_DISTINCT_RUNS = 256
"""Most distinct (noise multiplier, sample rate) pairs below sample rate 1 one request computes
curves for (``too_many_runs``; 422 beyond): a curve costs 0.3-1 ms typically and up to about
4-6 ms (sample rate 0.5, noise multiplier 1,000) on a loaded 2-core machine, so 256 stay near a
second at worst, where the 10,000 entries a compose body may hold took 16.8 s (a helper's
search). Steps and counts of one pair share its curve."""


def too_many_runs(mechanisms: Iterable[Mechanism]) -> str | None:
    """Why ``mechanisms`` hold too many distinct subsampled Gaussians for one request (None when
    they do not)."""
    pairs = {
        (m.noise_multiplier, m.sample_rate)
        for m in mechanisms
        if isinstance(m, SubsampledGaussian) and m.sample_rate != 1.0
    }
    if len(pairs) <= MAX_DISTINCT_RUNS:
        return None
    return (
        f"at most {MAX_DISTINCT_RUNS} distinct subsampled_gaussian (noise multiplier, sample "
        f"rate) pairs in one request, got {len(pairs)} (each curve costs up to a few "
        "milliseconds): send them in parts"
    )


@dataclass(frozen=True, slots=True)
class SubsampledGaussian(Mechanism):
    """Poisson-subsampled Gaussian (DP-SGD): ``steps`` steps, each including every record with
    probability ``sample_rate``, clipping contributions to L2 norm ``sensitivity`` and adding
    N(0, sigma^2); the noise multiplier is sigma / sensitivity (= sigma with the default 1).

    Neighbours: add or remove one record (replace-one is not covered). RDP: the MTZ19 series
    [MTZ19 section 3.3] (``app.accounting.subsampled_gaussian``). rho = steps / (2 nm^2): zCDP
    gets no amplification from subsampling, so rho is valid but loose: use RDP accounting for
    DP-SGD. A sample rate of 1 is the plain Gaussian mechanism (Gaussian-only, so the exact
    conversion applies).
    """

    kind: ClassVar[str] = "subsampled_gaussian"
    repetition_params: ClassVar[tuple[str, ...]] = ("count", "steps")
    sigma: float = param(
        help="Noise standard deviation (the noise multiplier when sensitivity is 1).",
        unit="units of the clipping norm",
        minimum=MIN_SCALE,
        maximum=MAX_SCALE,
    )
    sample_rate: float = param(
        help="Probability that each record is included in a step (Poisson sampling).",
        minimum=0.0,
        maximum=1.0,
        exclusive_minimum=True,
    )
    steps: int = param(
        help="Number of training steps (required: a run charged without it would be one step).",
        minimum=1,
        maximum=MAX_COUNT,
    )
    sensitivity: float = param(
        default=1.0,
        help="Clipping norm (L2 sensitivity of one record's contribution).",
        unit="units of the clipping norm",
        minimum=MIN_SCALE,
        maximum=MAX_SCALE,
        omit_default=True,
    )

    @property
    def noise_multiplier(self) -> float:
        return self.sigma / self.sensitivity

    def validate(self) -> None:
        nm = self.noise_multiplier
        if not MIN_NOISE_MULTIPLIER <= nm <= MAX_NOISE_MULTIPLIER:
            raise ValueError(
                f"sigma / sensitivity (the noise multiplier) must be in "
                f"[{MIN_NOISE_MULTIPLIER:g}, {MAX_NOISE_MULTIPLIER:g}], got {nm!r}"
            )

    def repetitions(self) -> int:
        return self.steps * self.count

    def unit(self) -> SubsampledGaussian:
        if self.steps == 1 and self.count == 1:
            return self
        return self._with(steps=1, count=1)

    def curve_on(self, orders: Mask) -> PrivacyCurve:
        """The composed curve evaluated only at the grid orders where ``orders`` is true (+inf,
        a vacuous bound, elsewhere): cheaper, for searches that check the full curve at the
        end. Never below ``curve()`` where evaluated (the same bounds and margin)."""
        return SubsampledGaussian.curves_on([self], orders)[0]

    @staticmethod
    def curves_on(mechanisms: Sequence[SubsampledGaussian], orders: Mask) -> list[PrivacyCurve]:
        """``curve_on`` of several mechanisms, computed together: the values ``curve()`` takes
        through ``_raw_curves`` and ``finish`` (rho, and every order of a sample rate of 1, the
        Gaussian-only curve, bit for bit), with the subsampled orders outside ``orders``
        left out."""
        raw = SubsampledGaussian._raw_curves([m.unit() for m in mechanisms], orders)
        return [
            finish(raw.row(i), m, partial=True).scaled(m.repetitions())
            for i, m in enumerate(mechanisms)
        ]

    @classmethod
    def unit_spreads(cls, units: Sequence[SubsampledGaussian]) -> Vector | None:
        """The signed series' width where it gives the value (``rdp_batch``'s ``spread``): at
        tiny sample rates its rounding moves with the CPU's exp and log by more than 1e-12 of
        the value (3e-7 at q = 1e-6, sigma = 0.65, order 9.3, an AVX-512 and an AVX2 machine)."""
        nm = np.array([u.noise_multiplier for u in units])
        q = np.array([u.sample_rate for u in units])
        out = np.zeros((len(units), ORDERS.size))
        sampled = np.flatnonzero(q < 1.0)
        if sampled.size:
            part = np.zeros((sampled.size, ORDERS.size))
            rdp_batch(q[sampled], nm[sampled], spread=part)
            out[sampled] = part
        return out

    @classmethod
    def _raw_curves(
        cls, units: Sequence[SubsampledGaussian], orders: Mask | None = None
    ) -> UnitCurves:
        nm = np.array([u.noise_multiplier for u in units])
        q = np.array([u.sample_rate for u in units])
        rho = gaussian_rho_up(
            np.array([u.sensitivity for u in units]), np.array([u.sigma for u in units])
        )
        everyone = q == 1.0  # every record in every step: the Gaussian mechanism
        rdp = (0.5 / (nm * nm))[:, None] * ORDERS  # (+ the kinds' evaluation margin)
        sampled = np.flatnonzero(~everyone)
        if sampled.size:
            rdp[sampled] = rdp_batch(q[sampled], nm[sampled], orders)
        curves = UnitCurves.of(rho, rdp, math.inf)
        curves.gaussian_only[:] = everyone
        return curves


def _from_poisson_event(event: Mapping[str, Any], translate: Translate) -> list[Mechanism]:
    """``PoissonSampledDpEvent(sampling_probability, GaussianDpEvent(noise_multiplier))``: one
    DP-SGD step (dp_accounting's add/remove relation)."""
    q = event_number(event, "sampling_probability")
    inner = event.get("event")
    inner_type = inner.get("type") if isinstance(inner, Mapping) else type(inner).__name__
    if inner_type != "GaussianDpEvent":
        raise ValueError(f"PoissonSampledDpEvent over {inner_type} has no translation")
    assert isinstance(inner, Mapping)
    check_event_fields(inner, ("noise_multiplier",))
    nm = event_number(inner, "noise_multiplier")
    if q == 0:
        return []  # nothing is sampled: no privacy cost
    if nm <= 0:
        raise ValueError("GaussianDpEvent with noise_multiplier 0 is not differentially private")
    return [SubsampledGaussian(sigma=nm, sample_rate=q, steps=1)]


# --- Poisson sampling over a composition of Gaussians ------------------------------------------

EFFECTIVE_NM_MARGIN = 4e-15
"""The effective noise multiplier of a composition is lowered by this fraction: its float
evaluation is within a few ulps of the exact value, and a smaller noise multiplier can only
charge more (an upper bound stays one)."""


MIN_SAMPLING_PROBABILITY = sys.float_info.min
"""The least positive sampling probability a PoissonSampledDpEvent may have: the floor the API
puts on a ``subsampled_gaussian``'s sample_rate (below it 1/q overflows, and the PLD of the step
cannot be built)."""


def _check_poisson_event(event: Mapping[str, Any], path: str, depth: int) -> Any:
    """A probability, and a Poisson-sampled Gaussian's noise multiplier in the range this kind
    accepts, named on the event. Poisson sampling over a composition of Gaussians
    (``ComposedDpEvent`` / ``SelfComposedDpEvent`` trees whose leaves are all
    ``GaussianDpEvent``) becomes Poisson sampling over one Gaussian of the effective noise
    multiplier ``(sum_i 1 / sigma_i^2)^(-1/2)``: k Gaussian queries of one sample are one
    Gaussian query of the concatenated (L2) answer, noise rescaled (Mironov, Talwar and Zhang
    2019, "Renyi differential privacy of the sampled Gaussian mechanism", arXiv:1908.10530, and
    section 3 of arXiv:1812.06210). dp_accounting's RDP accountant does exactly this
    (``rdp_privacy_accountant._effective_gaussian_noise_multiplier``); any other leaf under the
    sampling is refused, as there."""
    where = at("PoissonSampledDpEvent", path)
    q = number(event, "sampling_probability")
    if q is not None:
        if not math.isfinite(q):
            raise DpEventError(f"{where}: sampling_probability {q} is not finite", path)
        if q < 0:
            raise DpEventError(f"{where}: sampling_probability {q!r} is negative", path)
        if q > 1:
            raise DpEventError(
                f"{where}: sampling_probability {q!r} is above 1 (it is a probability)", path
            )
        if 0 < q < MIN_SAMPLING_PROBABILITY:
            raise DpEventError(
                f"{where}: sampling_probability {q!r} is below the smallest accepted "
                f"{MIN_SAMPLING_PROBABILITY!r} (the smallest normal float, the floor of a "
                "subsampled_gaussian's sample_rate); charge that instead (an upper bound)",
                path,
            )
    inner = event.get("event")
    inner_path = join(path, "event")
    if not isinstance(inner, Mapping):
        return event
    if inner.get("type") in (COMPOSED, SELF_COMPOSED):
        nm = _effective_noise_multiplier(inner, inner_path, depth + 1, where)
        what = (
            f"the effective noise multiplier {nm!r} ((sum 1/sigma_i^2)^(-1/2)) of its "
            f"{inner.get('type')} of GaussianDpEvents"
        )
        if q != 0:
            _check_noise(nm, what, where, path)
        return {**event, "event": {"type": "GaussianDpEvent", "noise_multiplier": nm}}
    if inner.get("type") == "GaussianDpEvent" and q != 0:
        given = number(inner, "noise_multiplier")
        if given is not None:
            _check_noise(given, f"its GaussianDpEvent's noise_multiplier {given!r}", where, path)
    return event


def _check_noise(nm: float, what: str, where: str, path: str) -> None:
    """A Poisson-sampled Gaussian's noise multiplier in the range the ledger accepts."""
    if not math.isfinite(nm):
        raise DpEventError(f"{where}: {what} is not finite", path)
    if nm < 0:
        raise DpEventError(f"{where}: {what} is negative", path)
    if nm == 0:
        raise DpEventError(f"{where}: {what} adds no noise: not differentially private", path)
    if nm < MIN_NOISE_MULTIPLIER:
        raise DpEventError(
            f"{where}: {what} is below the smallest accepted {MIN_NOISE_MULTIPLIER:g}", path
        )
    if nm > MAX_NOISE_MULTIPLIER:
        raise DpEventError(
            f"{where}: {what} is above the largest accepted {MAX_NOISE_MULTIPLIER:g}", path
        )


def _gaussians(event: Any, path: str, depth: int, where: str) -> Iterator[tuple[float, float]]:
    """(noise multiplier, repetitions) of every Gaussian leaf of a composition under Poisson
    sampling; ``DpEventError`` for anything else there."""
    if depth > MAX_EVENT_DEPTH:
        raise DpEventError(f"DpEvent nested deeper than {MAX_EVENT_DEPTH} levels", path)
    kind = event.get("type") if isinstance(event, Mapping) else type(event).__name__
    if kind == "GaussianDpEvent":
        assert isinstance(event, Mapping)
        only(event, ("noise_multiplier",), path)
        nm = number(event, "noise_multiplier")
        if nm is None:
            raise DpEventError(
                f"{at('GaussianDpEvent', path)}: noise_multiplier must be a number, got "
                f"{event.get('noise_multiplier')!r}",
                path,
            )
        gauss = at("GaussianDpEvent", path)
        if not math.isfinite(nm):
            raise DpEventError(f"{gauss}: noise_multiplier {nm} is not finite", path)
        if nm < 0:
            raise DpEventError(f"{gauss}: noise_multiplier {nm!r} is negative", path)
        if nm == 0:
            raise DpEventError(
                f"{gauss}: noise_multiplier 0 adds no noise: not differentially private", path
            )
        yield nm, 1.0
        return
    if kind == COMPOSED:
        assert isinstance(event, Mapping)
        only(event, ("events",), path)
        events = event.get("events")
        if not isinstance(events, list):
            raise DpEventError(f"{at(COMPOSED, path)} needs a list 'events'", path)
        for i, e in enumerate(events):
            yield from _gaussians(e, join(path, f"events[{i}]"), depth + 1, where)
        return
    if kind == SELF_COMPOSED:
        assert isinstance(event, Mapping)
        only(event, ("event", "count"), path)
        count = event.get("count")
        if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count:
            raise DpEventError(
                f"{at(SELF_COMPOSED, path)}: count must be an integer >= 0, got {count!r}",
                path,
            )
        if count > MAX_EVENT_COUNT:
            raise DpEventError(
                f"{at(SELF_COMPOSED, path)}: count must be <= {MAX_EVENT_COUNT}", path
            )
        for nm, n in _gaussians(event.get("event"), join(path, "event"), depth + 1, where):
            yield nm, n * count
        return
    raise DpEventError(
        f"{where} over a composition holding {kind} (at {path}) has no translation: under "
        "Poisson sampling only GaussianDpEvents, composed or self-composed, have one (as in "
        "dp_accounting's RDP accountant)",
        path,
    )


def _effective_noise_multiplier(
    inner: Mapping[str, Any], path: str, depth: int, where: str
) -> float:
    """(sum of n_i / sigma_i^2)^(-1/2) over the Gaussians (sigma_i, repeated n_i times) of
    ``inner``, computed scale-free (relative to the smallest sigma, so that neither 1e-200 nor
    1e200 over- or underflows) and lowered by ``EFFECTIVE_NM_MARGIN``."""
    parts = [(nm, n) for nm, n in _gaussians(inner, path, depth, where) if n > 0]
    if not parts:
        raise DpEventError(
            f"{where} over a {inner.get('type')} holding no GaussianDpEvent (empty or count 0): "
            "nothing is sampled, and dp_accounting has no translation for it either",
            path,
        )
    least = min(nm for nm, _ in parts)
    total = math.fsum(n * (least / nm) ** 2 for nm, n in parts)
    return least / math.sqrt(total) * (1.0 - EFFECTIVE_NM_MARGIN)


SPEC = KindSpec(
    mechanism=SubsampledGaussian,
    description="DP-SGD: Poisson-subsampled Gaussian steps (per-example clipping plus noise).",
    neighbours="Add or remove one record; noise multiplier = sigma / sensitivity.",
    pld="subsampled_gaussian",
    calibration={"sigma": "min", "steps": "max"},
    dp_events={"PoissonSampledDpEvent": _from_poisson_event},
    dp_event_checks={"PoissonSampledDpEvent": _check_poisson_event},
    steep_curve=True,
    title="DP-SGD (subsampled Gaussian)",
    next_query=NextQuery(
        {"parameter": "steps", "sample_rate": 0.01, "sigma": 1}, "sampling rate 0.01, σ = 1"
    ),
    examples=KindSpec.Examples(
        valid=(
            {"sigma": 2.0, "sample_rate": 0.01, "steps": 10, "sensitivity": 2.0},
            {"sigma": 1.1, "sample_rate": 0.01, "steps": 1000},
            {"sigma": 2.0, "sample_rate": 0.001, "steps": 10},
        ),
        edges=(
            {"sigma": 1e-3, "sample_rate": 5e-324, "steps": 1},
            {"sigma": 1e6, "sample_rate": 5e-324, "steps": 1},
            {"sigma": 1.0, "sample_rate": 1 - 1e-12, "steps": 1},
            {"sigma": 1000.0, "sample_rate": 0.5, "steps": 1},
        ),
        calibration={
            "sigma": (
                {"sample_rate": 0.01, "steps": 100},
                {"sample_rate": 0.01, "steps": 20, "sensitivity": 2.0},
                {"sample_rate": 0.01, "steps": 1000},
            ),
            "steps": ({"sample_rate": 0.01, "sigma": 1.5}, {"sample_rate": 0.01, "sigma": 1.0}),
        },
    ),
)
