"""Mechanism objects as the HTTP contract spells them: plain dicts, with small builders.

A charge takes any mapping with a ``mechanism`` field (the server validates it and answers 422
with a reason when it is wrong), so a kind the server learns later needs no client release:
``mechanism("zcdp", rho=0.01)``. The builders below spell the kinds the server accepts today
(``GET /v1/mechanisms`` lists them with their fields).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

Mechanism = dict[str, Any]


def mechanism(kind: str, /, **fields: Any) -> Mechanism:
    """Any mechanism object: ``mechanism("laplace", epsilon=0.5)``. ``None`` fields are left out."""
    return {"mechanism": kind, **{k: v for k, v in fields.items() if v is not None}}


def gaussian(sigma: float, sensitivity: float = 1.0, count: int = 1) -> Mechanism:
    """Gaussian noise of standard deviation ``sigma`` on a query of L2 ``sensitivity``."""
    return mechanism("gaussian", sigma=sigma, sensitivity=sensitivity, count=count)


def laplace(
    epsilon: float | None = None,
    *,
    scale: float | None = None,
    sensitivity: float | None = None,
    count: int = 1,
) -> Mechanism:
    """Laplace noise: ``laplace(0.5)`` (epsilon-DP) or ``laplace(scale=2.0, sensitivity=1.0)``."""
    if (epsilon is None) == (scale is None):
        raise ValueError("give epsilon, or scale (with sensitivity)")
    if epsilon is not None:
        return mechanism("laplace", epsilon=epsilon, count=count)
    return mechanism(
        "laplace", scale=scale, sensitivity=1.0 if sensitivity is None else sensitivity, count=count
    )


def randomized_response(epsilon: float, k: int = 2, count: int = 1) -> Mechanism:
    """k-ary randomized response with parameter ``epsilon``."""
    return mechanism("randomized_response", epsilon=epsilon, k=k, count=count)


def rappor(epsilon: float, count: int = 1) -> Mechanism:
    """One-time RAPPOR; ``epsilon`` is the total for one user's value change."""
    return mechanism("rappor", epsilon=epsilon, count=count)


def subsampled_gaussian(
    sigma: float,
    sample_rate: float,
    steps: int,
    count: int = 1,
    *,
    sensitivity: float | None = None,
) -> Mechanism:
    """DP-SGD: ``steps`` Poisson-subsampled Gaussian steps with noise ``sigma`` (the noise
    multiplier is sigma / sensitivity; ``sensitivity`` is the clipping norm, default 1).
    ``steps`` has no default: a run charged as one step would be under-charged."""
    return mechanism(
        "subsampled_gaussian",
        sigma=sigma,
        sample_rate=sample_rate,
        steps=steps,
        sensitivity=sensitivity,
        count=count,
    )


def discrete_laplace(epsilon: float, sensitivity: int = 1, count: int = 1) -> Mechanism:
    """Discrete Laplace on integers with integer L1 ``sensitivity``."""
    if isinstance(sensitivity, bool) or not isinstance(sensitivity, int):
        raise TypeError(f"discrete_laplace sensitivity must be an int, got {sensitivity!r}")
    return mechanism("discrete_laplace", epsilon=epsilon, sensitivity=sensitivity, count=count)


def pure_dp(epsilon: float, count: int = 1) -> Mechanism:
    """Any epsilon-DP mechanism (charged at the worst case over all of them)."""
    return mechanism("pure_dp", epsilon=epsilon, count=count)


def exponential(epsilon: float, count: int = 1) -> Mechanism:
    """The exponential mechanism (epsilon-DP and epsilon-bounded range)."""
    return mechanism("exponential", epsilon=epsilon, count=count)


def approx_dp(epsilon: float, delta: float, count: int = 1) -> Mechanism:
    """Any (epsilon, delta)-DP mechanism (its delta adds to the ledger's)."""
    return mechanism("approx_dp", epsilon=epsilon, delta=delta, count=count)


def zcdp(
    rho: float, *, xi: float | None = None, delta: float | None = None, count: int = 1
) -> Mechanism:
    """A mechanism known by its zCDP guarantee rho (optionally xi, and delta: approximate zCDP)."""
    return mechanism("zcdp", rho=rho, xi=xi, delta=delta, count=count)


def rdp(
    orders: Sequence[float],
    epsilons: Sequence[float],
    *,
    delta: float | None = None,
    count: int = 1,
) -> Mechanism:
    """A mechanism known by its Renyi DP values ``epsilons`` at ``orders``."""
    return mechanism("rdp", orders=list(orders), epsilons=list(epsilons), delta=delta, count=count)


__all__ = [
    "Mechanism",
    "approx_dp",
    "exponential",
    "pure_dp",
    "rdp",
    "zcdp",
    "discrete_laplace",
    "gaussian",
    "laplace",
    "mechanism",
    "randomized_response",
    "rappor",
    "subsampled_gaussian",
]
