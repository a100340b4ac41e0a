"""Inverse questions: the least noise, largest epsilon or most steps that still fits.

Given a predicate ``fits(curve)`` (is the ledger plus this curve within the budget under the
dataset's filter?) and a mechanism with every parameter but one fixed, find the extreme value of
that parameter. ``fits`` is monotone in each parameter (more noise never costs more; larger
epsilon or more steps never cost less), so a bracketing search applies. The search always
returns a value that was checked to fit (rounding toward safety) and stops when the value one
relative step of ``REL_TOL`` further in the costly direction does not fit.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from scipy import optimize

from app.accounting import mechanisms as mech
from app.accounting import registry
from app.accounting.curve import PrivacyCurve
from app.accounting.filters import RHO_FILTERS, Budget, Filter, FilterKind, with_holds_bound
from app.accounting.orders import ORDERS


class Fits(Protocol):
    """Is a new curve within budget? ``margin`` > 0 when it fits, continuous in the curve;
    ``orders``: the Renyi orders the limits' conversions pick for it (none where rho decides)."""

    def __call__(self, curve: PrivacyCurve) -> bool: ...

    def margin(self, curve: PrivacyCurve) -> float: ...

    def orders(self, curve: PrivacyCurve) -> tuple[float, ...]: ...


REL_TOL = 1e-9


class _Parameters(Mapping[str, dict[str, str]]):
    """The kinds' calibration parameters, read from the registry when asked."""

    def __getitem__(self, kind: str) -> dict[str, str]:
        kinds = registry.KINDS
        if kind not in kinds:
            raise KeyError(kind)
        return dict(kinds[kind].calibration)

    def __iter__(self) -> Iterator[str]:
        return iter(registry.KINDS)

    def __len__(self) -> int:
        return len(registry.KINDS)


PARAMETERS: Mapping[str, dict[str, str]] = _Parameters()
"""kind -> {parameter: direction}; "min" = least value that fits, "max" = largest; the first
parameter is the default. Derived from the kinds' declarations (read when asked, so a kind
registered later, a test's, is calibrated too)."""

LEAST_POSITIVE = 1e-12
"""Lower end of the search for a parameter whose declared range starts at 0 (the search is
geometric)."""

SMALLEST_POSITIVE = 1e-300
"""Where the search of a parameter whose declared range starts at 0 goes on when nothing from
``LEAST_POSITIVE`` fits (a zcdp rho of 1.7e-13 fits a budget epsilon of 1e-5 ten times over)."""


def _range(kind: str, parameter: str) -> tuple[float, float]:
    """The declared range of ``parameter`` (from the kind's ``Param``)."""
    p = registry.spec(kind).param(parameter)
    assert p.minimum is not None and p.maximum is not None
    return max(p.minimum, LEAST_POSITIVE), p.maximum


@dataclass(frozen=True)
class Calibration:
    """The calibrated mechanism, the parameter searched, its value and the curve it adds."""

    mechanism: mech.Mechanism
    parameter: str
    value: float
    curve: PrivacyCurve


def default_parameter(kind: str) -> str:
    """The parameter calibrated when none is named (noise for Gaussians, epsilon otherwise)."""
    if kind not in PARAMETERS:
        raise ValueError(f"unknown mechanism {kind!r}")
    if not PARAMETERS[kind]:
        raise ValueError(f"{kind}: no parameter to calibrate")
    return next(iter(PARAMETERS[kind]))


def _form(kind: str, name: str) -> tuple[str, ...] | None:
    """The group of ``KindSpec.one_of`` (a form of the mechanism object) holding ``name``."""
    return next((g for g in registry.spec(kind).one_of if name in g), None)


def refused_input(
    kind: str, parameter: str, name: str, ask: Callable[[str], str] = "parameter={}".format
) -> str | None:
    """Why ``name`` may not be given when calibrating ``parameter`` of ``kind`` (None: it may,
    as a fixed parameter of the answer); ``ask(p)`` says how to ask for parameter ``p``.
    Calibration used to drop such a value and answer without it:

    * ``parameter`` itself: it is what the search chooses (a gaussian ``sigma=3`` was ignored;
      a DP-SGD ``sigma``, which asks for the most ``steps``, got a sigma for one step);
    * a field the kind does not have;
    * a field of another form of the mechanism (``KindSpec.one_of``): a Laplace calibrated by
      epsilon answers an epsilon, which holds for any sensitivity (a given ``sensitivity`` was
      dropped; ``scale`` calibrates with it), and a Laplace ``scale`` fixes its epsilon."""
    others = [q for q in PARAMETERS[kind] if q != parameter]
    if name == parameter:
        alternative = next((q for q in others if refused_input(kind, q, name) is None), None)
        return f"{name!r} is the parameter calibration solves for: leave it out" + (
            f", or ask {ask(alternative)} to solve for {alternative} with {name} fixed"
            if alternative is not None
            else ""
        )
    fields = [p.name for p in registry.spec(kind).params]
    if name not in fields:
        return f"{kind} has no parameter {name!r} (its parameters: {', '.join(fields)})"
    mine, theirs = _form(kind, parameter), _form(kind, name)
    if mine is not None and theirs is not None and mine != theirs:
        if name in PARAMETERS[kind]:
            instead = f", or ask {ask(name)} to calibrate {name}"
        else:
            q = next((q for q in PARAMETERS[kind] if q in theirs), None)
            instead = f", or ask {ask(q)}, which answers with this {name}" if q else ""
        return (
            f"{name!r} belongs to the {' + '.join(theirs)} form of {kind}, and calibrating "
            f"{parameter} answers in its {' + '.join(mine)} form: leave {name} out{instead}"
        )
    return None


def _zero_allowed(kind: str, parameter: str) -> bool:
    """Whether ``parameter`` is an epsilon or rho whose declared range includes 0 (approx_dp's
    epsilon, zcdp's rho). The geometric search starts at ``LEAST_POSITIVE``; where nothing from
    there fits, a smaller value or 0 itself may (a charge of it was admitted while calibrate
    answered 409)."""
    p = registry.spec(kind).param(parameter)
    return PARAMETERS[kind][parameter] == "max" and p.minimum == 0.0 and not p.exclusive_minimum


def _costly(m: mech.Mechanism | None) -> bool:
    """Whether ``m`` costs anything at all (a zcdp of rho 0 and no xi or delta does not: it
    reads no data, so it is no answer to what still fits)."""
    if m is None:
        return False
    c = m.curve()
    return bool(c.rho > 0.0 or c.pure_eps > 0.0 or c.delta > 0.0 or (c.rdp > 0.0).any())


def _build(kind: str, params: dict[str, Any], parameter: str, value: float) -> mech.Mechanism:
    return mech.mechanism_from_dict({"mechanism": kind, **params, parameter: value})


def calibrate(kind: str, params: dict[str, Any], parameter: str, fits: Fits) -> Calibration | None:
    """The extreme value of ``parameter`` for mechanism ``kind`` with the other ``params`` that
    still ``fits``; None when no value in the allowed range fits (budget exhausted). A value in
    ``params`` the answer would not hold is a ``ValueError`` saying why (``refused_input``)."""
    if kind not in PARAMETERS:
        raise ValueError(f"unknown mechanism {kind!r}")
    if parameter not in PARAMETERS[kind]:
        raise ValueError(
            f"{kind}: can calibrate {', '.join(sorted(PARAMETERS[kind]))}, not {parameter!r}"
        )
    params = {k: v for k, v in params.items() if k != "mechanism"}
    for name in sorted(params):
        refused = refused_input(kind, parameter, name)
        if refused is not None:
            raise ValueError(refused)
    if parameter == "steps":
        return _most_steps(params, fits)
    if kind == "subsampled_gaussian":
        return _least_subsampled_sigma(params, fits)
    direction = PARAMETERS[kind][parameter]
    lo_limit, hi_limit = _range(kind, parameter)

    def build(v: float) -> mech.Mechanism | None:
        try:
            return _build(kind, params, parameter, v)
        except ValueError:
            return None  # outside the mechanism's valid range (e.g. sensitivity / sigma)

    def ok(v: float) -> bool:
        m = build(v)
        return m is not None and fits(m.curve())

    def margin(v: float) -> float:
        m = build(v)
        return -math.inf if m is None else fits.margin(m.curve())

    increasing_cost = direction == "max"
    valid = _valid_range(lambda v: build(v) is not None, lo_limit, hi_limit, increasing_cost)
    if valid is None:  # the other parameters make no mechanism at all: say why (a 422)
        try:
            _build(kind, params, parameter, math.sqrt(lo_limit * hi_limit))
        except ValueError as exc:
            raise ValueError(f"no {parameter} gives a valid {kind} mechanism: {exc}") from None
        raise AssertionError("a valid mechanism the probes missed")  # pragma: no cover
    value = _search(ok, margin, *valid, increasing_cost=increasing_cost)
    if value is None and _zero_allowed(kind, parameter):
        # below the search's range: down to SMALLEST_POSITIVE, then 0 itself (an approx_dp of
        # its delta alone, a zcdp of its xi or delta)
        value = _search(ok, margin, SMALLEST_POSITIVE, valid[0], increasing_cost=True)
        if value is None and _costly(build(0.0)) and ok(0.0):
            value = 0.0
    if value is None:
        return None
    m = build(value)
    assert m is not None
    return Calibration(mechanism=m, parameter=parameter, value=value, curve=m.curve())


VALID_PROBES = 64
"""Points (geometric over the declared range) tried for a valid mechanism when the cheap end of
the range is not one (``_valid_range``)."""


def _valid_range(
    valid: Callable[[float], bool], lo: float, hi: float, increasing_cost: bool
) -> tuple[float, float] | None:
    """[lo, hi] with its cheap end (hi for a noise, lo for an epsilon) moved in to where the
    mechanism is valid, or None when no probe is. Each parameter is checked against its own
    range, but other parameters bound it too: a Laplace ``scale`` of 1e10 with sensitivity 1
    is an epsilon below the least one accepted, so the cheap end of the scale's range is no
    mechanism at all, and the search, which reads an invalid value as one that does not fit,
    answered 409 on an empty dataset. The valid values of one parameter, the others fixed, are
    an interval (each bound is a monotone condition on it), so the edge is found by bisection
    from the valid probe nearest the cheap end: at most ``VALID_PROBES`` + ~2 x 64 checks."""
    cheap = lo if increasing_cost else hi
    if valid(cheap):
        return lo, hi
    probes = np.geomspace(lo, hi, VALID_PROBES)
    order = probes if increasing_cost else probes[::-1]  # from the cheap end
    inside = next((float(v) for v in order if valid(float(v))), None)
    if inside is None:
        return None
    good, _ = _bisect(valid, inside, cheap, 0.0)  # to adjacent floats: the cheapest valid value
    return (good, hi) if increasing_cost else (lo, good)


@dataclass(frozen=True)
class _Bracket:
    """Where a monotone predicate's boundary lies: ``good`` fits; ``bad`` (one factor of at
    most e^0.01 away, in the costly direction) does not, or is None when the costly end of the
    range itself fits (no boundary inside the range: ``good`` is that end)."""

    good: float
    bad: float | None


def _bracket(
    ok: Callable[[float], bool], lo: float, hi: float, increasing_cost: bool
) -> _Bracket | None:
    """The boundary of ``ok`` on [lo, hi] to a factor e^0.01 (geometric bisection from near 1),
    or None when nothing in the range fits. ``increasing_cost`` as in ``_search``."""
    good, bad = (lo, hi) if increasing_cost else (hi, lo)
    if not ok(good):
        return None
    if ok(bad):
        return _Bracket(bad, None)
    probe = min(max(1.0, lo), hi)  # start near 1 rather than across 18 decades
    if probe not in (lo, hi):
        if ok(probe):
            good = probe
        else:
            bad = probe
    good, bad = _bisect(ok, good, bad, 0.01)
    return _Bracket(good, bad)


def _bracket_down(ok: Callable[[float], bool], lo: float, good: float) -> _Bracket:
    """``_bracket`` of a predicate true at ``good`` whose boundary is expected a little below
    it (a previous window's answer: a larger window needs at most as much noise): steps down of
    e^-0.01, doubling while they fit, then bisection to a factor e^0.01. A boundary a factor r
    below costs about 2 log2(100 log r + 1) + 2 evaluations, instead of the ~11 of bisecting the
    whole range from ``lo``."""
    step, bad = 0.01, None
    while bad is None:
        v = max(good * math.exp(-step), lo)
        if v == good:
            return _Bracket(good, None)
        if ok(v):
            good, step = v, 2.0 * step
        else:
            bad = v
    good, bad = _bisect(ok, good, bad, 0.01)
    return _Bracket(good, bad)


def _bisect(
    ok: Callable[[float], bool], good: float, bad: float, tolerance: float
) -> tuple[float, float]:
    """Geometric bisection of [good, bad] (``ok(good)``, not ``ok(bad)``) until they are within
    a factor e^tolerance, or adjacent floats."""
    while abs(math.log(bad) - math.log(good)) > tolerance:
        mid = math.sqrt(good * bad)
        if mid in (good, bad):
            break
        if ok(mid):
            good = mid
        else:
            bad = mid
    return good, bad


def _refine(
    ok: Callable[[float], bool],
    margin: Callable[[float], float],
    good: float,
    bad: float,
    increasing_cost: bool,
) -> float:
    """The boundary inside a bracket (``good`` fits, ``bad`` does not) to ``REL_TOL``: Brent's
    method on the continuous ``margin`` (in log space), then a step to the safe side until
    ``ok`` holds; bisection where the margin gives no sign change."""
    m_good, m_bad = margin(good), margin(bad)
    if m_good == 0.0:  # the bracket landed on the edge itself (a Laplace scale of exactly
        return good  # sensitivity / eps_B): it fits, and nothing beyond it does
    lo_x, hi_x = math.log(good), math.log(bad)
    if math.isfinite(m_good) and math.isfinite(m_bad) and m_good > 0 > m_bad:

        def at(x: float) -> float:
            # the bracket's ends are the values whose margins were just taken (exp(log(v))
            # need not be v: two more curves of a search, once, and signs to check again)
            return margin(good if x == lo_x else bad if x == hi_x else math.exp(x))

        root = math.exp(optimize.brentq(at, lo_x, hi_x, xtol=REL_TOL / 8, rtol=1e-15))
        # finish on the safe side of the root, never beyond the known-good end: the root is
        # within REL_TOL / 8 of the boundary and the doubling steps overshoot by at most twice
        # what is needed, so the answer ends within REL_TOL / 2 of the boundary
        step = REL_TOL / 64
        candidate = root
        while not ok(candidate):
            candidate = candidate * math.exp(step if not increasing_cost else -step)
            step *= 2.0
            if (candidate >= good) if increasing_cost is False else (candidate <= good):
                return good
        return candidate
    return _bisect(ok, good, bad, REL_TOL)[0]


def _search(
    ok: Callable[[float], bool],
    margin: Callable[[float], float],
    lo: float,
    hi: float,
    increasing_cost: bool,
) -> float | None:
    """Boundary of a monotone predicate on [lo, hi]: geometric bisection to a factor 1.01
    (``_bracket``), then Brent's method on the continuous ``margin`` (``_refine``). The value
    returned fits, and one relative step of ``REL_TOL`` further in the costly direction does
    not (to within rounding).

    increasing_cost=True: ok holds below the boundary (largest fitting value is returned);
    False: ok holds above it (least fitting value is returned).
    """
    b = _bracket(ok, lo, hi, increasing_cost)
    if b is None or b.bad is None:
        return None if b is None else b.good
    return _refine(ok, margin, b.good, b.bad, increasing_cost)


def extend(
    ok: Callable[[float], bool | None],
    start: float,
    limit: float,
    increasing_cost: bool,
    evaluations: int,
    first_step: float = 0.01,
    guess: float | None = None,
    after_guess: float | None = None,
) -> float:
    """From ``start`` (known to fit), the furthest value toward ``limit`` (in the costly
    direction) that ``ok`` confirms, with at most ``evaluations`` calls of ``ok``: steps of
    e^first_step, doubling (in log space) while they fit, then bisection between the last value
    that fit and the first that did not. The answer is ``start`` or a value ``ok`` returned True
    for; the work is the count given, whatever ``ok`` does (a second, costlier rule that may
    admit more than the one ``start`` was searched by: a ``pld`` dataset's distribution). ``ok``
    returns None when its own work budget is spent: the search stops there. A ``guess`` beyond
    ``start`` is tried first: if it fits, the steps go on from it (as large as the jump); if
    not, the bisection starts between the two. ``after_guess``, if given, is the first step
    after a guess that fits instead (a guess close to the edge: a small step, not the jump)."""
    sign = 1.0 if increasing_cost else -1.0
    good, bad = start, None
    step = first_step
    if guess is not None and evaluations > 0 and (guess > start) == increasing_cost:
        guess = min(guess, limit) if increasing_cost else max(guess, limit)
        if guess != start:
            evaluations -= 1
            fits = ok(guess)
            if fits is None:
                return good
            if fits:
                jump = abs(math.log(guess / start)) if start > 0.0 else 0.0  # (from 0: no ratio)
                good, step = guess, (max(first_step, jump) if after_guess is None else after_guess)
            else:
                bad = guess
    while evaluations > 0 and bad is None:
        v = good * math.exp(sign * step)
        v = min(v, limit) if increasing_cost else max(v, limit)
        if v == good:
            return good
        evaluations -= 1
        fits = ok(v)
        if fits is None:
            return good
        if fits:
            good, step = v, 2.0 * step
        else:
            bad = v
    while evaluations > 0 and bad is not None:
        mid = math.sqrt(good * bad)
        if mid in (good, bad):
            break
        evaluations -= 1
        fits = ok(mid)
        if fits is None:
            return good
        if fits:
            good = mid
        else:
            bad = mid
    return good


def further(
    kind: str,
    params: dict[str, Any],
    start: Calibration,
    admits: Callable[[mech.Mechanism, float], bool | None],
    evaluations: int,
    guess: float | None = None,
    after_guess: float | None = None,
) -> Calibration:
    """``start`` (a calibration of ``kind``'s ``start.parameter`` by a fast rule) moved in the
    costly direction as far as ``admits(mechanism, value)`` (a second rule, admitting at least
    what the first does) confirms, in at most ``evaluations`` calls (``extend``; ``admits``
    returns None to stop early), trying ``guess`` first if given (then a step of
    ``after_guess``, if given, when it fits)."""
    parameter = start.parameter
    increasing_cost = PARAMETERS[kind][parameter] == "max"
    lo, hi = _range(kind, parameter)
    params = {k: v for k, v in params.items() if k not in ("mechanism", parameter)}

    def ok(v: float) -> bool | None:
        try:
            m = _build(kind, params, parameter, v)
        except ValueError:
            return False
        return admits(m, v)

    value = extend(
        ok,
        start.value,
        hi if increasing_cost else lo,
        increasing_cost,
        evaluations,
        guess=guess,
        after_guess=after_guess,
    )
    if value == start.value:
        return start
    m = _build(kind, params, parameter, value)
    return Calibration(mechanism=m, parameter=parameter, value=value, curve=m.curve())


def _most_steps(params: dict[str, Any], fits: Fits) -> Calibration | None:
    """Largest integer ``steps`` (exponential then binary search), at most what the per-entry
    limit on repetitions (steps x count <= ``MAX_COUNT``) lets one entry carry."""
    unit = mech.mechanism_from_dict({"mechanism": "subsampled_gaussian", **params, "steps": 1})
    per_step = unit.curve()
    limit = mech.MAX_COUNT // unit.count

    def ok(n: int) -> bool:
        return fits(per_step.scaled(n))

    if not ok(1):
        return None
    good, bad = 1, 2
    while bad <= limit and ok(bad):
        good, bad = bad, bad * 2
    bad = min(bad, limit + 1)
    while bad - good > 1:
        mid = (good + bad) // 2
        if ok(mid):
            good = mid
        else:
            bad = mid
    m = mech.mechanism_from_dict({"mechanism": "subsampled_gaussian", **params, "steps": good})
    return Calibration(
        mechanism=m, parameter="steps", value=float(good), curve=per_step.scaled(good)
    )


NOISE_MULTIPLIERS = (1e-3, 1e6)
"""The range of DP-SGD noise multipliers (sigma / sensitivity) the sigma search covers, where
sigma itself is valid (``_noise_multipliers``)."""

EDGE_STEPS = 16
"""Floats an end of the noise multipliers' range is moved inward, at most, until its sigma
(noise multiplier x sensitivity, rounded) is a valid mechanism."""


def _noise_multipliers(
    build: Callable[[float], mech.Mechanism], sensitivity: float
) -> tuple[float, float]:
    """The least and largest DP-SGD noise multipliers the sigma search may try with this
    ``sensitivity``: ``NOISE_MULTIPLIERS`` within what the range of sigma itself allows
    ([``MIN_SCALE``, ``MAX_SCALE``] / sensitivity), each end moved inward by a few floats
    where the rounded product or quotient falls outside (``build(nm)`` is the mechanism of
    noise multiplier ``nm``). The search read an invalid sigma as an error: with a clipping
    norm of 1e-5 or 1e7 every calibration was a 422 about a sigma of 1e-8 or 1e13 that nobody
    gave. A ``ValueError`` (a 422) where an end makes no mechanism for another reason."""

    def inward(nm: float, toward: float) -> float:
        for _ in range(EDGE_STEPS):
            try:
                build(nm)
            except ValueError:
                nm = math.nextafter(nm, toward)
                continue
            return nm
        build(nm)  # the mechanism's own error (another parameter is invalid)
        raise AssertionError("unreachable")  # pragma: no cover

    lo = inward(max(NOISE_MULTIPLIERS[0], mech.MIN_SCALE / sensitivity), math.inf)
    hi = inward(min(NOISE_MULTIPLIERS[1], mech.MAX_SCALE / sensitivity), -math.inf)
    return lo, hi


def costly_end(kind: str, parameter: str) -> float:
    """The costly end of ``parameter``'s declared range (the least noise, the largest
    epsilon or rho, the most steps)."""
    lo, hi = _range(kind, parameter)
    return hi if PARAMETERS[kind][parameter] == "max" else lo


def cheapest(kind: str, params: dict[str, Any], parameter: str) -> Calibration | None:
    """The least costly invocation a calibration of ``parameter`` tries, the cheap end of its
    search: one DP-SGD step, the most noise, the least epsilon that makes a valid mechanism with
    the other ``params``. Where a calibration finds nothing that fits, this is what was
    refused; None where no value makes a mechanism (the calibration is then a 422)."""
    params = {k: v for k, v in params.items() if k not in ("mechanism", parameter)}
    if parameter == "steps":
        value = 1.0
    elif kind == "subsampled_gaussian":
        sens = float(params.get("sensitivity", 1.0))
        try:
            _, most = _noise_multipliers(
                lambda nm: _build(kind, params, parameter, nm * sens), sens
            )
        except ValueError:
            return None
        value = most * sens
    else:

        def valid(v: float) -> bool:
            try:
                _build(kind, params, parameter, v)
            except ValueError:
                return False
            return True

        increasing_cost = PARAMETERS[kind][parameter] == "max"
        lo, hi = _range(kind, parameter)
        edges = _valid_range(valid, lo, hi, increasing_cost)
        if edges is None:
            return None
        value = edges[0] if increasing_cost else edges[1]
        if _zero_allowed(kind, parameter) and valid(0.0):
            costly = _costly(_build(kind, params, parameter, 0.0))
            value = 0.0 if costly else SMALLEST_POSITIVE
    try:
        m = _build(kind, params, parameter, int(value) if parameter == "steps" else value)
        return Calibration(mechanism=m, parameter=parameter, value=value, curve=m.curve())
    except ValueError:
        return None


def _least_subsampled_sigma(params: dict[str, Any], fits: Fits) -> Calibration | None:
    """Least noise multiplier for DP-SGD, searching on a window of orders.

    The search evaluates the curve only on a window of orders (others +inf: sound, only
    looser). Each window's answer is bracketed to 1 %; while the full grid's optimal order at
    that noise falls outside the window, the window moves there and the bracketing repeats. The
    last window's bracket is then narrowed to ``REL_TOL`` and the answer checked on the full grid
    (if its optimal order has moved out of the window after all, the window moves again). The
    returned value fits on the full grid.
    """
    q = float(params.get("sample_rate", 0.0))
    sens = float(params.get("sensitivity", 1.0))
    base = {k: v for k, v in params.items() if k != "sigma"}
    # validates q and the sensitivity; the search is over the noise multiplier nm = sigma / sens
    mech.SubsampledGaussian(sigma=sens, sample_rate=q, steps=1, sensitivity=sens)

    def build(nm: float) -> mech.SubsampledGaussian:
        m = mech.mechanism_from_dict(
            {"mechanism": "subsampled_gaussian", **base, "sigma": nm * sens}
        )
        assert isinstance(m, mech.SubsampledGaussian)
        return m

    seen: dict[tuple[float, bytes | None], PrivacyCurve] = {}

    def curve(nm: float, mask: np.ndarray | None) -> PrivacyCurve:
        """The curve at noise ``nm`` on ``mask`` (None: the full grid), each computed once: the
        bracketing, Brent's method (which starts at the bracket's ends) and the final checks
        ask for the same points again (a sixth of the curves of a search, before)."""
        key = (nm, None if mask is None else mask.tobytes())
        found = seen.get(key)
        if found is None:
            m = build(nm)
            found = seen[key] = m.curve() if mask is None else m.curve_on(mask)
        return found

    coarse = np.zeros(ORDERS.shape, dtype=bool)
    coarse[:: max(1, ORDERS.size // 24)] = True
    coarse[-1] = True
    mask = coarse
    lo_limit, hi_limit = _noise_multipliers(build, sens)

    def on(window: np.ndarray) -> tuple[Callable[[float], bool], Callable[[float], float]]:
        """``fits`` and its margin for the noise multiplier, on the orders of ``window``."""
        return (
            lambda s: fits(curve(s, window)),
            lambda s: fits.margin(curve(s, window)),
        )

    def covered(best: list[int], window: np.ndarray) -> bool:
        return all(window[max(b - 1, 0) : b + 2].all() for b in best)

    def around(best: list[int]) -> np.ndarray:
        """The coarse orders and those within a factor 2 of each order in ``best`` (one per
        limit: a window around one limit's order alone leaves another's at +inf, and the
        search then never fits below the largest noise)."""
        window: np.ndarray = coarse.copy()
        for b in best:
            window |= (ORDERS >= ORDERS[b] / 2) & (ORDERS <= ORDERS[b] * 2)
        return window

    # A larger window never needs more noise (orders outside a window count as +inf), so the
    # answer on one window is a fitting upper end of the search on the next. Each window is
    # only bracketed (to 1 %) until one covers the best order; only that one is searched to
    # REL_TOL (the precise search is most of the work: about 30 curves where the margin jumps).
    sigma = hi_limit
    for attempt in range(6):
        last = attempt == 5
        ok, margin = on(mask)
        b = (
            _bracket(ok, lo_limit, sigma, increasing_cost=False)
            if attempt == 0 or not ok(sigma)
            else _bracket_down(ok, lo_limit, sigma)
        )
        if b is None:
            # not even the largest noise fits on the window; try the full grid once
            if not fits(curve(hi_limit, None)):
                return None
            b = _Bracket(hi_limit, None)
        if not last:
            best = _best_order_indices(curve(b.good, None), fits)
            if not covered(best, mask):  # (b.good fits on the full grid: it fits on mask)
                mask = around(best)
                sigma = b.good
                continue
        sigma = b.good if b.bad is None else _refine(ok, margin, b.good, b.bad, False)
        full = curve(sigma, None)
        step = REL_TOL
        while not fits(full):
            # a window's values can fall below the full grid's where the full curve's work
            # budget bounds terms that the smaller window summed exactly: more noise, doubling
            # steps (at most about 45 of them up to the largest noise)
            if sigma >= hi_limit:
                return None
            sigma = min(sigma * math.exp(step), hi_limit)
            step *= 2.0
            full = curve(sigma, None)
        best = _best_order_indices(full, fits)
        if last or covered(best, mask):
            break
        mask = around(best)
    m = build(sigma)
    return Calibration(mechanism=m, parameter="sigma", value=m.sigma, curve=full)


def _best_order_indices(curve: PrivacyCurve, fits: Fits) -> list[int]:
    """Indices of the orders the limits' RDP conversions pick for ``curve`` (none for a limit
    where rho decides)."""
    return [int(np.argmin(np.abs(ORDERS - a))) for a in fits.orders(curve)]


@dataclass(frozen=True)
class FilterFit:
    """``Fits`` for a dataset: its composed ``total`` plus a new curve, under ``filter``."""

    filter: Filter
    total: PrivacyCurve
    additions: int = 1  # active holds + 1: admission's bound on every order of commits

    def _with(self, curve: PrivacyCurve) -> PrivacyCurve:
        """The total and the candidate as admission checks them (``with_holds_bound``: the same
        additions, so that an answer on the edge is admitted by the charge's own check)."""
        return with_holds_bound(self.total, None, curve, self.additions)

    def __call__(self, curve: PrivacyCurve) -> bool:
        return self.filter.admits(self._with(curve))

    def margin(self, curve: PrivacyCurve) -> float:
        combined = self._with(curve)
        f = self.filter
        if f.kind in RHO_FILTERS:
            if f.kind is FilterKind.GDP and not combined.gaussian_only:
                return -math.inf
            if not f.entry_deltas_fit(combined):
                return -math.inf
            if f.admits_by_bound(combined):
                assert f.bound is not None
                return f.bound - combined.rho
            # entries' own deltas on a non-adaptive filter: it admits by the conversion at what
            # they leave of the budget delta (``Filter._within``), not by the bound, which is
            # for all of it
        return f.budget.epsilon - f.spend(combined).epsilon

    def orders(self, curve: PrivacyCurve) -> tuple[float, ...]:
        if self.filter.kind in RHO_FILTERS:
            return ()
        order = self.filter.spend(self._with(curve)).order
        return () if order is None else (order,)


@dataclass(frozen=True)
class AllFit:
    """``Fits`` of several limits at once (a block's budget, a lifetime budget, an
    allocation's): a curve fits when it fits every one. The margin is the least of theirs (its
    sign says whether all fit; continuous, so the search's root finding applies), the order the
    orders those of every limit."""

    fits: tuple[FilterFit, ...]

    def __call__(self, curve: PrivacyCurve) -> bool:
        return all(f(curve) for f in self.fits)

    def margin(self, curve: PrivacyCurve) -> float:
        return min(f.margin(curve) for f in self.fits)

    def orders(self, curve: PrivacyCurve) -> tuple[float, ...]:
        return tuple(a for f in self.fits for a in f.orders(curve))


def envelope(curves: list[PrivacyCurve]) -> PrivacyCurve:
    """The least curve at least every one of ``curves`` at every order (rho, pure epsilon and
    delta likewise): a new curve that fits on top of it, under a filter monotone in the curve,
    fits on top of each of them. Exact when one curve is largest everywhere."""
    return PrivacyCurve(
        rho=max(c.rho for c in curves),
        rdp=np.max(np.stack([c.rdp for c in curves]), axis=0),
        pure_eps=max(c.pure_eps for c in curves),
        gaussian_only=all(c.gaussian_only for c in curves),
        delta=max(c.delta for c in curves),
    )


def filter_fits(
    kind: FilterKind,
    total: PrivacyCurve,
    epsilon_budget: float,
    delta_budget: float,
    rho_bound: float | None,
) -> FilterFit:
    """The ``Fits`` of a dataset with composed ``total`` and budget (epsilon, delta) under a
    filter without stored parameters (the earlier interface; ``fits_under`` takes any)."""
    return FilterFit(Filter(kind, Budget(epsilon_budget, delta_budget), rho_bound), total)


def fits_under(f: Filter, total: PrivacyCurve, holds: int = 0) -> FilterFit:
    """The ``Fits`` of a dataset under ``Filter`` ``f`` whose ledger with its ``holds`` active
    holds composes to ``total`` (committed + held, in that order)."""
    return FilterFit(f, total, holds + 1)


__all__ = [
    "PARAMETERS",
    "REL_TOL",
    "AllFit",
    "envelope",
    "Calibration",
    "FilterFit",
    "Fits",
    "calibrate",
    "cheapest",
    "costly_end",
    "default_parameter",
    "filter_fits",
    "fits_under",
    "refused_input",
]
