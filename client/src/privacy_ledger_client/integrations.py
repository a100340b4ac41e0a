"""Releases made with other DP libraries, as what the ledger charges.

* Opacus: ``opacus_dp_event(history)`` turns an accountant's history, a list of
  ``(noise_multiplier, sample_rate, steps)`` (``RDPAccountant.history``), into one dp_accounting
  event as JSON; ``LedgerClient.charge_opacus`` charges it in one request, all or none.
* OpenDP: ``opendp_mechanism(measurement, d_in)`` runs the measurement's privacy map and reads
  its output measure: ``MaxDivergence`` -> ``pure_dp``, ``ZeroConcentratedDivergence`` ->
  ``zcdp``, ``Approximate(MaxDivergence)`` -> ``approx_dp`` (``pure_dp`` when delta is 0),
  ``Approximate(ZeroConcentratedDivergence)`` -> ``zcdp`` with its delta. Any other measure
  (a privacy profile: fix a delta with ``make_fix_delta`` first) raises ``ValueError`` naming it.

Neither library is imported: the objects are read by their public attributes.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Sequence
from typing import Any

from privacy_ledger_client._mechanisms import Mechanism, approx_dp, pure_dp, zcdp

OpacusStep = tuple[float, float, int]


def opacus_dp_event(history: Iterable[Sequence[Any]]) -> dict[str, Any]:
    """The dp_accounting event (JSON) of an Opacus history: each ``(noise_multiplier,
    sample_rate, steps)`` is ``steps`` Poisson-subsampled Gaussian steps (add/remove-one)."""
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
            if not math.isfinite(float(value)):
                raise ValueError(f"history[{i}]: {name} must be finite, got {value!r}")
        step = {
            "type": "PoissonSampledDpEvent",
            "sampling_probability": float(q),
            "event": {"type": "GaussianDpEvent", "noise_multiplier": float(nm)},
        }
        events.append({"type": "SelfComposedDpEvent", "event": step, "count": int(steps)})
    if not events:
        raise ValueError("the Opacus history is empty: nothing to charge")
    return {"type": "ComposedDpEvent", "events": events}


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"OpenDP {what} must be a number, got {value!r}")
    return float(value)


def opendp_mechanism(measurement: Any, d_in: Any, count: int = 1) -> Mechanism:
    """The generic mechanism for an OpenDP measurement at input distance ``d_in`` (see the
    module docstring for the measures read)."""
    measure = str(getattr(measurement, "output_measure", ""))
    loss = measurement.map(d_in)
    if measure == "MaxDivergence":
        return pure_dp(_number(loss, "epsilon"), count=count)
    if measure == "ZeroConcentratedDivergence":
        return zcdp(_number(loss, "rho"), count=count)
    if measure.startswith("Approximate("):
        inner = measure[len("Approximate(") : -1]
        if not isinstance(loss, tuple | list) or len(loss) != 2:
            raise ValueError(f"OpenDP {measure}: expected (loss, delta), got {loss!r}")
        value, delta = _number(loss[0], "loss"), _number(loss[1], "delta")
        if inner == "MaxDivergence":
            if delta == 0.0:
                return pure_dp(value, count=count)
            return approx_dp(value, delta, count=count)
        if inner == "ZeroConcentratedDivergence":
            return zcdp(value, delta=delta if delta > 0.0 else None, count=count)
    raise ValueError(
        f"OpenDP measure {measure or type(measurement).__name__!r} has no translation "
        "(MaxDivergence, ZeroConcentratedDivergence and Approximate(...) of either have one; "
        "for a privacy profile, fix a delta with make_fix_delta first)"
    )


__all__ = ["OpacusStep", "opacus_dp_event", "opendp_mechanism"]
