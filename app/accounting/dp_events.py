"""A dp_accounting ``DpEvent`` (as JSON) -> the mechanisms the ledger charges: the one
translation shared by ``POST /v1/datasets/{id}/charges/dp_event`` and the deprecated
``app.client.from_dp_event``.

``registry.mechanisms_from_dp_event`` translates the event tree (each kind module its own leaf
events). This module runs before it, over the same tree, and does two things:

* **Poisson sampling over a composition of Gaussians** (``PoissonSampledDpEvent`` over a
  ``ComposedDpEvent`` / ``SelfComposedDpEvent`` tree whose leaves are all ``GaussianDpEvent``)
  becomes one Poisson-subsampled Gaussian with the effective noise multiplier
  ``(sum_i 1 / sigma_i^2)^(-1/2)``: k Gaussian queries of one sample are one Gaussian query of
  the concatenated (L2) answer, noise rescaled (Mironov, Talwar and Zhang 2019, "Renyi
  differential privacy of the sampled Gaussian mechanism", arXiv:1908.10530, and section 3 of
  arXiv:1812.06210). dp_accounting's RDP accountant does exactly this
  (``rdp_privacy_accountant._effective_gaussian_noise_multiplier``); any other leaf under the
  sampling is refused, as there.
* **Errors that name the event**: a value out of range is reported with the event's type, its
  own field and value and where it sits in the tree (``events[2].event``), not the ledger
  field it becomes ("LaplaceDpEvent: noise_multiplier 1e+10 gives epsilon 1e-10, below ...").

Nothing is clamped: every event parameter becomes a ledger parameter that must lie in the
range its kind accepts. A loss below the smallest epsilon a pure-DP kind accepts
(``MIN_EPSILON``) is refused, and the error says how to record it as an upper bound;
kinds whose range includes 0 (``zcdp`` rho, a Gaussian of huge sigma) take it as it is.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any

from app.accounting.kinds import KINDS
from app.accounting.kinds._spec import MIN_EPSILON, Mechanism, Param
from app.accounting.kinds.subsampled_gaussian import MAX_NOISE_MULTIPLIER, MIN_NOISE_MULTIPLIER
from app.accounting.registry import (
    MAX_EVENT_COUNT,
    MAX_EVENT_DEPTH,
    mechanism_from_dict,
    mechanisms_from_dp_event,
    merge_counts,
)

EFFECTIVE_NM_MARGIN = 4e-15
"""The effective noise multiplier of a composition is lowered by this fraction: its float
evaluation is within a few ulps of the exact value, and a smaller noise multiplier can only
charge more (an upper bound stays one)."""

BELOW_MIN_EPSILON = (
    f"a loss below the smallest epsilon the ledger accepts ({MIN_EPSILON:g}) is refused, not "
    "rounded; to record it, charge an upper bound instead, e.g. "
    f'{{"mechanism": "pure_dp", "epsilon": {MIN_EPSILON:g}}}'
)


class DpEventError(ValueError):
    """A DpEvent the ledger cannot charge; ``path`` is where in the tree (``events[1].event``,
    ``""`` for the event itself)."""

    def __init__(self, message: str, path: str = "") -> None:
        super().__init__(message)
        self.path = path


def translate(event: Mapping[str, Any]) -> list[Mechanism]:
    """The mechanisms whose composition is ``event``, identical ones merged (counts added, in
    the order of first appearance); ``[]`` when it charges nothing. ``DpEventError`` (a
    ``ValueError``) names the event type, its field and value, and its place in the tree."""
    return merged(mechanisms_from_dp_event(prepared(event)))


def merged(mechanisms: list[Mechanism]) -> list[Mechanism]:
    """Identical mechanisms (every field but ``count``) merged into one, counts added, in the
    order of first appearance."""
    return [mechanism_from_dict(d) for d in merge_counts(m.to_dict() for m in mechanisms)]


def prepared(event: Mapping[str, Any]) -> Any:
    """``event`` with each Poisson sampling over a composition of Gaussians replaced by one
    over their effective Gaussian, after checking every leaf's values (see the module
    docstring). What it does not check, ``registry.mechanisms_from_dp_event`` does."""
    return _walk(event, "", 0)


# --- the walk ----------------------------------------------------------------------------------


def _at(kind: str, path: str) -> str:
    return f"{kind} at {path}" if path else kind


def _join(path: str, part: str) -> str:
    return f"{path}.{part}" if path and not part.startswith("[") else f"{path}{part}"


def _walk(event: Any, path: str, depth: int) -> Any:
    if not isinstance(event, Mapping) or depth > MAX_EVENT_DEPTH:
        return event  # the registry's error
    kind = event.get("type")
    if kind == "ComposedDpEvent" and isinstance(event.get("events"), list):
        return {
            **event,
            "events": [
                _walk(e, _join(path, f"events[{i}]"), depth + 1)
                for i, e in enumerate(event["events"])
            ],
        }
    if kind == "SelfComposedDpEvent":
        return {**event, "event": _walk(event.get("event"), _join(path, "event"), depth + 1)}
    if kind == "PoissonSampledDpEvent":
        return _poisson(event, path, depth)
    check = _LEAF_CHECKS.get(kind) if isinstance(kind, str) else None
    if check is not None:
        check(event, path)
    return event


def _poisson(event: Mapping[str, Any], path: str, depth: int) -> Any:
    where = _at("PoissonSampledDpEvent", path)
    q = _number(event, "sampling_probability")
    if q is not None:
        if not math.isfinite(q):
            raise DpEventError(f"{where}: sampling_probability {q} is not finite", path)
        if q < 0:
            raise DpEventError(f"{where}: sampling_probability {q!r} is negative", path)
        if q > 1:
            raise DpEventError(
                f"{where}: sampling_probability {q!r} is above 1 (it is a probability)", path
            )
    inner = event.get("event")
    inner_path = _join(path, "event")
    if not isinstance(inner, Mapping):
        return event
    if inner.get("type") in ("ComposedDpEvent", "SelfComposedDpEvent"):
        nm = _effective_noise_multiplier(inner, inner_path, depth + 1, where)
        what = (
            f"the effective noise multiplier {nm!r} ((sum 1/sigma_i^2)^(-1/2)) of its "
            f"{inner.get('type')} of GaussianDpEvents"
        )
        if q != 0:
            _check_noise(nm, what, where, path)
        return {**event, "event": {"type": "GaussianDpEvent", "noise_multiplier": nm}}
    if inner.get("type") == "GaussianDpEvent" and q != 0:
        given = _number(inner, "noise_multiplier")
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
        _only(event, ("noise_multiplier",), path)
        nm = _number(event, "noise_multiplier")
        if nm is None:
            raise DpEventError(
                f"{_at('GaussianDpEvent', path)}: noise_multiplier must be a number, got "
                f"{event.get('noise_multiplier')!r}",
                path,
            )
        gauss = _at("GaussianDpEvent", path)
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
    if kind == "ComposedDpEvent":
        assert isinstance(event, Mapping)
        _only(event, ("events",), path)
        events = event.get("events")
        if not isinstance(events, list):
            raise DpEventError(f"{_at('ComposedDpEvent', path)} needs a list 'events'", path)
        for i, e in enumerate(events):
            yield from _gaussians(e, _join(path, f"events[{i}]"), depth + 1, where)
        return
    if kind == "SelfComposedDpEvent":
        assert isinstance(event, Mapping)
        _only(event, ("event", "count"), path)
        count = event.get("count")
        if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count:
            raise DpEventError(
                f"{_at('SelfComposedDpEvent', path)}: count must be an integer >= 0, got {count!r}",
                path,
            )
        if count > MAX_EVENT_COUNT:
            raise DpEventError(
                f"{_at('SelfComposedDpEvent', path)}: count must be <= {MAX_EVENT_COUNT}", path
            )
        for nm, n in _gaussians(event.get("event"), _join(path, "event"), depth + 1, where):
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


# --- leaves: each event's own fields, checked against what its kind accepts ---------------------


def _number(event: Mapping[str, Any], name: str) -> float | None:
    """A numeric field, or None when it is not a number (the registry's error names it)."""
    value = event.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _only(event: Mapping[str, Any], allowed: tuple[str, ...], path: str) -> None:
    known = {"type", *allowed}
    if extra := sorted(str(k) for k in event if k not in known):
        raise DpEventError(
            f"{_at(str(event.get('type')), path)}: unknown field(s) "
            f"{', '.join(repr(n) for n in extra)}: nothing is charged for an event with fields "
            "this ledger does not read (a sensitivity or delta left out would under-state its "
            "loss)",
            path,
        )


def _param(kind: str, name: str) -> Param:
    return next(p for p in KINDS[kind].params if p.name == name)


def _outside(p: Param, value: float) -> str | None:
    """Why ``value`` is outside ``p``'s range ("below the smallest accepted epsilon 1e-09"),
    or None."""
    lo = p.minimum if p.minimum is not None else -math.inf
    hi = p.maximum if p.maximum is not None else math.inf
    if (p.exclusive_minimum and value <= lo) or (p.exclusive_maximum and value >= hi):
        brackets = ("(" if p.exclusive_minimum else "[", ")" if p.exclusive_maximum else "]")
        return f"outside the accepted {p.name} range {brackets[0]}{lo:g}, {hi:g}{brackets[1]}"
    if value < lo:
        return f"below the smallest accepted {p.name} {lo:g}"
    if value > hi:
        return f"above the largest accepted {p.name} {hi:g}"
    return None


def _sign(where: str, field: str, value: float, path: str, *, zero: str | None = None) -> None:
    """Not finite, negative, or (``zero``: why 0 is refused) zero: said as such."""
    if not math.isfinite(value):
        raise DpEventError(f"{where}: {field} {value} is not finite", path)
    if value < 0:
        raise DpEventError(f"{where}: {field} {value!r} is negative", path)
    if value == 0 and zero is not None:
        raise DpEventError(f"{where}: {field} 0 {zero}", path)


def _epsilon(where: str, what: str, kind: str, epsilon: float, path: str) -> None:
    """A pure-DP epsilon derived from the event's fields, in ``kind``'s range."""
    why = _outside(_param(kind, "epsilon"), epsilon)
    if why is None:
        return
    rule = f": {BELOW_MIN_EPSILON}" if epsilon < MIN_EPSILON else ""
    raise DpEventError(f"{where}: {what} gives epsilon {epsilon:g}, {why}{rule}", path)


def _direct(where: str, field: str, value: float, kind: str, name: str, path: str) -> None:
    """A field that is the ledger parameter ``name`` of ``kind`` itself."""
    _sign(where, field, value, path)
    why = _outside(_param(kind, name), value)
    if why is not None:
        raise DpEventError(f"{where}: {field} {value!r} is {why}", path)


NO_NOISE = "adds no noise: not differentially private"


def _gaussian(event: Mapping[str, Any], path: str) -> None:
    where = _at("GaussianDpEvent", path)
    nm = _number(event, "noise_multiplier")
    if nm is None:
        return
    _sign(where, "noise_multiplier", nm, path, zero=NO_NOISE)
    why = _outside(_param("gaussian", "sigma"), nm)
    if why is not None:
        raise DpEventError(
            f"{where}: noise_multiplier {nm!r} (the Gaussian's sigma at sensitivity 1) is {why}",
            path,
        )


def _laplace(event: Mapping[str, Any], path: str) -> None:
    where = _at("LaplaceDpEvent", path)
    nm = _number(event, "noise_multiplier")
    if nm is None:
        return
    _sign(where, "noise_multiplier", nm, path, zero=NO_NOISE)
    _epsilon(where, f"noise_multiplier {nm!r}", "laplace", 1.0 / nm, path)


def _randomized_response(event: Mapping[str, Any], path: str) -> None:
    where = _at("RandomizedResponseDpEvent", path)
    p, k = _number(event, "noise_parameter"), _number(event, "num_buckets")
    if p is None or k is None:
        return
    _sign(where, "noise_parameter", p, path, zero="never answers uniformly: not private")
    if p > 1:
        raise DpEventError(
            f"{where}: noise_parameter {p!r} is above 1 (it is the probability of a uniform "
            "answer)",
            path,
        )
    _sign(where, "num_buckets", k, path)
    if k < 2 or not k.is_integer():
        raise DpEventError(f"{where}: num_buckets {k!r} must be an integer >= 2", path)
    if p < 1:  # (1: a uniform answer, charged as nothing)
        why = _outside(_param("randomized_response", "k"), k)
        if why is not None:
            raise DpEventError(f"{where}: num_buckets {k!r} is {why}", path)
        epsilon = math.log(k / p - k + 1)
        _epsilon(
            where,
            f"noise_parameter {p!r} with num_buckets {k:g}",
            "randomized_response",
            epsilon,
            path,
        )


def _discrete_laplace(event: Mapping[str, Any], path: str) -> None:
    where = _at("DiscreteLaplaceDpEvent", path)
    a, sens = _number(event, "noise_parameter"), _number(event, "sensitivity")
    if a is None or sens is None:
        return
    _sign(where, "noise_parameter", a, path, zero=NO_NOISE)
    _sign(where, "sensitivity", sens, path)
    if sens < 1 or not sens.is_integer():
        raise DpEventError(f"{where}: sensitivity {sens!r} must be an integer >= 1", path)
    why = _outside(_param("discrete_laplace", "sensitivity"), sens)
    if why is not None:
        raise DpEventError(f"{where}: sensitivity {sens!r} is {why}", path)
    _epsilon(
        where,
        f"noise_parameter {a!r} with sensitivity {sens:g}",
        "discrete_laplace",
        a * sens,
        path,
    )


def _zcdp(event: Mapping[str, Any], path: str) -> None:
    where = _at("ZCDpEvent", path)
    for name in ("rho", "xi"):
        value = _number(event, name)
        if value is not None:
            _direct(where, name, value, "zcdp", name, path)


def _epsilon_delta(event: Mapping[str, Any], path: str) -> None:
    where = _at("EpsilonDeltaDpEvent", path)
    for name in ("epsilon", "delta"):
        value = _number(event, name)
        if value is not None:
            _direct(where, name, value, "approx_dp", name, path)


_LEAF_CHECKS = {
    "GaussianDpEvent": _gaussian,
    "LaplaceDpEvent": _laplace,
    "RandomizedResponseDpEvent": _randomized_response,
    "DiscreteLaplaceDpEvent": _discrete_laplace,
    "ZCDpEvent": _zcdp,
    "EpsilonDeltaDpEvent": _epsilon_delta,
}


__all__ = [
    "BELOW_MIN_EPSILON",
    "EFFECTIVE_NM_MARGIN",
    "DpEventError",
    "merged",
    "prepared",
    "translate",
]
