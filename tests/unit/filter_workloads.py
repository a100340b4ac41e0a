"""The four workloads on which admission filters are compared (issue 13), shared by
tests/unit/test_adaptive_filter.py and bench/filters.py.

Each workload is an endless sequence of charges (mechanism objects as on the wire); a filter's
score is the number of charges admitted before the first refusal.

* ``gaussian``: Gaussian queries, sensitivity 1, sigma drawn uniformly from [20, 100]
  (numpy default_rng(SEED)).
* ``laplace``: Laplace queries with epsilon = 0.01.
* ``dpsgd``: single DP-SGD steps, Poisson sample rate 0.01, noise multiplier 1.
* ``mixed``: a repeating cycle of eight charges: Gaussian (sigma from the same draw),
  Laplace 0.01, Gaussian, 4-ary randomized response 0.02, Gaussian, discrete Laplace 0.02 with
  sensitivity 2, a 10-step DP-SGD batch (sample rate 0.01, noise multiplier 2), RAPPOR 0.05.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np

from app.accounting.curve import PrivacyCurve
from app.accounting.mechanisms import mechanism_from_dict
from app.accounting.orders import ORDERS

SEED = 20261123
MAX_CHARGES = 400_000
WORKLOADS = ("gaussian", "laplace", "dpsgd", "mixed")

_SIGMAS = np.random.default_rng(SEED).uniform(20.0, 100.0, MAX_CHARGES)

Entry = dict[str, Any]

LAPLACE: Entry = {"mechanism": "laplace", "epsilon": 0.01}
DPSGD_STEP: Entry = {
    "mechanism": "subsampled_gaussian",
    "sigma": 1.0,
    "sample_rate": 0.01,
    "steps": 1,
}
MIXED_CYCLE: tuple[Entry | None, ...] = (
    None,  # a Gaussian with the next sigma of the draw
    LAPLACE,
    None,
    {"mechanism": "randomized_response", "epsilon": 0.02, "k": 4},
    None,
    {"mechanism": "discrete_laplace", "epsilon": 0.02, "sensitivity": 2},
    {"mechanism": "subsampled_gaussian", "sigma": 2.0, "sample_rate": 0.01, "steps": 10},
    {"mechanism": "rappor", "epsilon": 0.05},
)


def gaussian_sigmas(n: int) -> np.ndarray:
    """The first ``n`` sigmas of the draw."""
    return _SIGMAS[:n]


def charge(workload: str, i: int) -> Entry:
    """The ``i``-th charge (0-based) of a workload."""
    if workload == "gaussian":
        return {"mechanism": "gaussian", "sigma": float(_SIGMAS[i])}
    if workload == "laplace":
        return dict(LAPLACE)
    if workload == "dpsgd":
        return dict(DPSGD_STEP)
    if workload == "mixed":
        cycle, pos = divmod(i, len(MIXED_CYCLE))
        entry = MIXED_CYCLE[pos]
        if entry is None:
            return {"mechanism": "gaussian", "sigma": float(_SIGMAS[3 * cycle + pos // 2])}
        return dict(entry)
    raise ValueError(f"unknown workload {workload!r}")


def prefix(workload: str, n: int) -> tuple[np.ndarray, Counter[tuple[tuple[str, Any], ...]]]:
    """The first ``n`` charges grouped: (Gaussian sigmas, counts of every other parameter set)."""
    sigmas: list[float] = []
    others: Counter[tuple[tuple[str, Any], ...]] = Counter()
    if workload == "gaussian":
        return gaussian_sigmas(n), others
    if workload in ("laplace", "dpsgd"):
        if n:
            others[tuple(sorted(charge(workload, 0).items()))] = n
        return np.array(sigmas), others
    cycles, rest = divmod(n, len(MIXED_CYCLE))
    for pos, entry in enumerate(MIXED_CYCLE):
        k = cycles + (1 if pos < rest else 0)
        if entry is not None and k:
            others[tuple(sorted(entry.items()))] += k
    per_cycle = sum(1 for e in MIXED_CYCLE if e is None)
    n_gauss = per_cycle * cycles + sum(1 for e in MIXED_CYCLE[:rest] if e is None)
    return gaussian_sigmas(n_gauss), others


def total_curve(workload: str, n: int) -> PrivacyCurve:
    """The composed curve of the first ``n`` charges (Gaussians: rho summed exactly)."""
    sigmas, others = prefix(workload, n)
    rho = math.fsum((0.5 / sigmas**2).tolist())
    total = (
        PrivacyCurve(rho=rho, rdp=ORDERS * rho, pure_eps=math.inf, gaussian_only=True)
        if sigmas.size
        else PrivacyCurve.zero()
    )
    for params, count in others.items():
        total = total + mechanism_from_dict(dict(params)).curve().scaled(count)
    return total


def count_admitted(admits: Callable[[int], bool], start: int = 1, limit: int = MAX_CHARGES) -> int:
    """The largest n with admits(n), for a predicate true up to some n and false after
    (doubling from ``start``, then bisection)."""
    if not admits(1):
        return 0
    lo, hi = 1, max(2, start)
    while admits(hi):
        lo, hi = hi, hi * 2
        if hi > limit:
            raise RuntimeError("workload too short for this budget")
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if admits(mid):
            lo = mid
        else:
            hi = mid
    return lo
