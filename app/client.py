"""Deprecated home of the Python client: it now lives in ``privacy_ledger_client``.

This module re-exports that package, so ``from app.client import LedgerClient`` keeps working
while callers move to ``from privacy_ledger_client import LedgerClient``. It also keeps
``from_dp_event``, the local translation of dp_accounting events into our mechanism objects,
until the server translates events itself (the client then sends ``dp_event_to_dict(event)``).
"""

from __future__ import annotations

import math
from typing import Any

from privacy_ledger_client import *  # noqa: F403 - the shim re-exports the whole public surface
from privacy_ledger_client import (
    Mechanism,
    gaussian,
    laplace,
    randomized_response,
    subsampled_gaussian,
)
from privacy_ledger_client import __all__ as _client_all

__all__ = [*_client_all, "from_dp_event"]


# --- dp_accounting interop -----------------------------------------------------------------


def from_dp_event(event: Any) -> list[Mechanism]:
    """Translate a dp_accounting ``DpEvent`` into a list of our mechanisms.

    Supported (by class name and attributes, without importing dp_accounting):
    ``GaussianDpEvent(noise_multiplier)`` -> gaussian with sigma = noise_multiplier, sensitivity 1;
    ``LaplaceDpEvent(noise_multiplier)`` -> laplace with epsilon = 1 / noise_multiplier;
    ``RandomizedResponseDpEvent(noise_parameter p, num_buckets k)`` -> k-ary RR with
    epsilon = log(k / p - k + 1) (dp_accounting's REPLACE_ONE semantics);
    ``PoissonSampledDpEvent(sampling_probability, GaussianDpEvent)`` -> one DP-SGD step;
    ``SelfComposedDpEvent(event, count)`` and ``ComposedDpEvent(events)``.
    Anything else raises ``ValueError`` naming the event.
    """
    name = type(event).__name__
    if name == "GaussianDpEvent":
        nm = float(event.noise_multiplier)
        if nm <= 0:
            raise ValueError(
                "GaussianDpEvent with noise_multiplier 0 is not differentially private"
            )
        return [gaussian(sigma=nm, sensitivity=1.0)]
    if name == "LaplaceDpEvent":
        nm = float(event.noise_multiplier)
        if nm <= 0:
            raise ValueError("LaplaceDpEvent with noise_multiplier 0 is not differentially private")
        return [laplace(1.0 / nm)]
    if name == "RandomizedResponseDpEvent":
        p, k = float(event.noise_parameter), int(event.num_buckets)
        if not 0 < p <= 1 or k < 2:
            raise ValueError(
                f"RandomizedResponseDpEvent(noise_parameter={p}, num_buckets={k}): no translation"
            )
        if p == 1:
            return []  # uniform output: no privacy cost
        return [randomized_response(math.log(k / p - k + 1), k)]
    if name == "PoissonSampledDpEvent":
        inner = event.event
        if type(inner).__name__ != "GaussianDpEvent":
            raise ValueError(
                f"PoissonSampledDpEvent over {type(inner).__name__} has no translation"
            )
        return [
            subsampled_gaussian(
                float(inner.noise_multiplier), float(event.sampling_probability), steps=1
            )
        ]
    if name == "SelfComposedDpEvent":
        parts = from_dp_event(event.event)
        n = int(event.count)
        return [_repeat(m, n) for m in parts]
    if name == "ComposedDpEvent":
        out: list[Mechanism] = []
        for e in event.events:
            out.extend(from_dp_event(e))
        return out
    if name == "NoOpDpEvent":
        return []
    raise ValueError(f"{name} has no translation to privacy-ledger mechanisms")


def _repeat(m: Mechanism, n: int) -> Mechanism:
    if m["mechanism"] == "subsampled_gaussian" and m.get("count", 1) == 1:
        return {**m, "steps": m["steps"] * n}
    return {**m, "count": m.get("count", 1) * n}
