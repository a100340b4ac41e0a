"""Releases made with other DP libraries, as what the ledger charges.

* Opacus: ``opacus_dp_event(history)`` turns an accountant's history, a list of
  ``(noise_multiplier, sample_rate, steps)`` (``RDPAccountant.history``), into one dp_accounting
  event as JSON; ``LedgerClient.charge_opacus`` charges it in one request, all or none.
* OpenDP: ``opendp_mechanism(measurement, d_in)`` runs the measurement's privacy map and reads
  its output measure: ``MaxDivergence`` -> ``pure_dp``, ``ZeroConcentratedDivergence`` ->
  ``zcdp``, ``Approximate(MaxDivergence)`` -> ``approx_dp`` (``pure_dp`` when delta is 0),
  ``Approximate(ZeroConcentratedDivergence)`` -> ``zcdp`` with its delta. Any other measure
  (a privacy profile: fix a delta with ``make_fix_delta`` first; a ``user_divergence``, whatever
  its name) raises ``ValueError`` naming it, and so does an odometer (it has no privacy map).
  Measures are compared with OpenDP's own
  (``dp.max_divergence()`` ...), never by their text; a loss that is NaN, infinite or negative
  (or a delta of 1 or more) is a ``ValueError`` naming OpenDP and the value.

Opacus is never imported (a history is plain numbers); OpenDP only by ``opendp_mechanism``, for
its measures to compare with (so the client works without either installed).
"""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Iterable, Sequence
from typing import Any

from privacy_ledger_client._errors import InvalidRequest
from privacy_ledger_client._mechanisms import Mechanism, approx_dp, pure_dp, zcdp

OpacusStep = tuple[float, float, int]


def opacus_dp_event(history: Iterable[Sequence[Any]]) -> dict[str, Any]:
    """The dp_accounting event (JSON) of an Opacus history: each ``(noise_multiplier,
    sample_rate, steps)`` is ``steps`` Poisson-subsampled Gaussian steps (add/remove-one), the
    i-th the event's ``events[i]``. ``ValueError`` naming ``history[i]``, the field and the
    value for what no ledger accepts (the server's own ranges are named by
    ``opacus_error``)."""
    events: list[dict[str, Any]] = []
    for i, item in enumerate(history):
        if len(item) != 3:
            raise ValueError(
                f"history[{i}]: expected (noise_multiplier, sample_rate, steps), got {item!r}"
            )
        nm, q, steps = item
        if isinstance(steps, bool) or not isinstance(steps, numbers.Integral) or steps < 1:
            raise ValueError(f"history[{i}]: steps must be an integer >= 1, got {steps!r}")
        for name, value in (("noise_multiplier", nm), ("sample_rate", q)):
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise ValueError(f"history[{i}]: {name} must be a number, got {value!r}")
            if not _finite(value):
                raise ValueError(f"history[{i}]: {name} must be finite, got {value!r}")
            if float(value) < 0:
                raise ValueError(f"history[{i}]: {name} {value!r} is negative")
        if float(nm) == 0:
            raise ValueError(
                f"history[{i}]: noise_multiplier 0 adds no noise: not differentially private"
            )
        if float(q) > 1:
            raise ValueError(f"history[{i}]: sample_rate {q!r} is above 1 (it is a probability)")
        step = {
            "type": "PoissonSampledDpEvent",
            "sampling_probability": float(q),
            "event": {"type": "GaussianDpEvent", "noise_multiplier": float(nm)},
        }
        events.append({"type": "SelfComposedDpEvent", "event": step, "count": int(steps)})
    if not events:
        raise ValueError("the Opacus history is empty: nothing to charge")
    if all(e["event"]["sampling_probability"] == 0.0 for e in events):
        raise ValueError(
            "every entry of the Opacus history has sample_rate 0: nothing was sampled, so "
            "there is nothing to charge"
        )
    return {"type": "ComposedDpEvent", "events": events}


def _finite(value: numbers.Real) -> bool:
    """Whether ``value`` is a finite float: an integer beyond the float range (JSON, and so
    ``--history``, allows any) is not (``float()`` of it raised OverflowError)."""
    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False


_EVENT_INDEX = re.compile(r"events\[(\d+)\]")


def opacus_error(exc: InvalidRequest, history: Sequence[Sequence[Any]]) -> InvalidRequest:
    """The server's refusal of an ``opacus_dp_event`` with the history entry it concerns named
    (``history[2] (noise_multiplier=..., sample_rate=..., steps=...)``), from the problem's
    ``event_path``; ``exc`` itself when it names none."""
    found = _EVENT_INDEX.match(str(exc.problem.get("event_path") or ""))
    if found is None or int(found.group(1)) >= len(history):
        return exc
    i = int(found.group(1))
    nm, q, steps = history[i]
    where = f"Opacus history[{i}] (noise_multiplier={nm!r}, sample_rate={q!r}, steps={steps!r})"
    return InvalidRequest(exc.status, {**exc.problem, "detail": f"{where}: {exc.detail}"})


def _loss(value: Any, what: str, *, below_one: bool = False) -> float:
    """A privacy loss read from an OpenDP map: a finite number >= 0 (a delta: also < 1), else
    ``ValueError`` naming OpenDP and the value (JSON has no NaN or infinity to send, and a
    negative loss has no meaning)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"OpenDP {what} must be a number, got {value!r}")
    x = float(value)
    if not math.isfinite(x) or x < 0 or (below_one and x >= 1):
        bounds = "in [0, 1)" if below_one else ">= 0"
        raise ValueError(f"OpenDP {what} must be finite and {bounds}, got {value!r}")
    return x


def _opendp_measures() -> tuple[Any, Any, Any, Any]:
    """OpenDP's MaxDivergence, ZeroConcentratedDivergence and their Approximate(...): the
    measures a measurement's ``output_measure`` is compared with (by equality, never by its
    text: a ``user_divergence("MaxDivergence")`` prints the same and means anything)."""
    try:
        import opendp.prelude as dp  # (only here: the client does not need OpenDP)
    except ImportError as exc:
        raise ValueError(
            f"reading an OpenDP measurement needs the opendp package ({exc})"
        ) from None
    pure, zcdp_ = dp.max_divergence(), dp.zero_concentrated_divergence()
    return pure, zcdp_, dp.approximate(pure), dp.approximate(zcdp_)


def opendp_mechanism(measurement: Any, d_in: Any, count: int = 1) -> Mechanism:
    """The generic mechanism for an OpenDP measurement at input distance ``d_in`` (see the
    module docstring for the measures read; each loss must be finite and >= 0, a delta < 1)."""
    measure = getattr(measurement, "output_measure", None)
    pure, rho, approx_pure, approx_rho = _opendp_measures()
    if measure is not None and measure in (pure, rho, approx_pure, approx_rho):
        if not callable(getattr(measurement, "map", None)):
            raise ValueError(
                f"OpenDP {type(measurement).__name__} has no privacy map to read at a d_in (an "
                "odometer's loss grows with what it runs): charge each measurement it runs, or "
                "the loss it reports once it is done as a pure_dp, approx_dp or zcdp entry"
            )
        loss = measurement.map(d_in)
        if measure == pure:
            return pure_dp(_loss(loss, "epsilon"), count=count)
        if measure == rho:
            return zcdp(_loss(loss, "rho"), count=count)
        if not isinstance(loss, tuple | list) or len(loss) != 2:
            raise ValueError(f"OpenDP {measure}: expected (loss, delta), got {loss!r}")
        delta = _loss(loss[1], "delta", below_one=True)
        if measure == approx_pure:
            epsilon = _loss(loss[0], "epsilon")
            if delta == 0.0:
                return pure_dp(epsilon, count=count)
            return approx_dp(epsilon, delta, count=count)
        return zcdp(_loss(loss[0], "rho"), delta=delta if delta > 0.0 else None, count=count)
    raise ValueError(
        f"OpenDP measure {str(measure) if measure is not None else type(measurement).__name__!r} "
        "has no translation (MaxDivergence, ZeroConcentratedDivergence and Approximate(...) of "
        "either have one, as OpenDP builds them; a user_divergence has none whatever its name; "
        "for a privacy profile, fix a delta with make_fix_delta first)"
    )


__all__ = ["OpacusStep", "opacus_dp_event", "opacus_error", "opendp_mechanism"]
