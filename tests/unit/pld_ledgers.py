"""Fixed-parameter ledgers covering every PLD kind, and dp_accounting references for them.

Shared by tests/unit/test_pld_mechanisms.py (tightness and soundness) and bench/pld.py (the
worst ratio per category). The references call dp_accounting 0.6.0's privacy_loss_distribution
functions directly at value_discretization_interval 1e-4, once pessimistic and once
optimistic, and self-compose counts explicitly (its PLDAccountant ignores the count around
randomized response).
"""

from __future__ import annotations

import math
from typing import Any

from dp_accounting.pld import common
from dp_accounting.pld import privacy_loss_distribution as dpl

Entry = dict[str, Any]
REF_INTERVAL = 1e-4

LEDGERS: dict[str, tuple[str, list[Entry]]] = {
    # name: (category, entries)
    "gaussian 10 x sigma=3": ("gaussian", [{"mechanism": "gaussian", "sigma": 3.0, "count": 10}]),
    "gaussian sigma=1,2,4,8": (
        "gaussian",
        [{"mechanism": "gaussian", "sigma": s} for s in (1.0, 2.0, 4.0, 8.0)],
    ),
    "gaussian 200 x sigma=40, sens 2": (
        "gaussian",
        [{"mechanism": "gaussian", "sigma": 40.0, "sensitivity": 2.0, "count": 200}],
    ),
    "laplace 100 x 0.1": ("laplace", [{"mechanism": "laplace", "epsilon": 0.1, "count": 100}]),
    "laplace scale 2 x 3": (
        "laplace",
        [{"mechanism": "laplace", "scale": 2.0, "sensitivity": 1.0, "count": 3}],
    ),
    "laplace 2000 x 0.01": ("laplace", [{"mechanism": "laplace", "epsilon": 0.01, "count": 2000}]),
    "discrete laplace 10 x (1, sens 3)": (
        "discrete_laplace",
        [{"mechanism": "discrete_laplace", "epsilon": 1.0, "sensitivity": 3, "count": 10}],
    ),
    "discrete laplace 50 x 0.2": (
        "discrete_laplace",
        [{"mechanism": "discrete_laplace", "epsilon": 0.2, "sensitivity": 1, "count": 50}],
    ),
    "binary RR 50 x 0.5": (
        "randomized_response",
        [{"mechanism": "randomized_response", "epsilon": 0.5, "k": 2, "count": 50}],
    ),
    "4-RR 20 x 1": (
        "randomized_response",
        [{"mechanism": "randomized_response", "epsilon": 1.0, "k": 4, "count": 20}],
    ),
    "10-RR 5 x 2": (
        "randomized_response",
        [{"mechanism": "randomized_response", "epsilon": 2.0, "k": 10, "count": 5}],
    ),
    "RAPPOR 10 x 2": ("rappor", [{"mechanism": "rappor", "epsilon": 2.0, "count": 10}]),
    "RAPPOR 40 x 0.5": ("rappor", [{"mechanism": "rappor", "epsilon": 0.5, "count": 40}]),
    "DP-SGD q=0.01 sigma=1 x 1000": (
        "subsampled_gaussian",
        [{"mechanism": "subsampled_gaussian", "sigma": 1.0, "sample_rate": 0.01, "steps": 1000}],
    ),
    "DP-SGD q=0.5 sigma=1.5 x 20": (
        "subsampled_gaussian",
        [{"mechanism": "subsampled_gaussian", "sigma": 1.5, "sample_rate": 0.5, "steps": 20}],
    ),
    "DP-SGD q=0.9 sigma=2 x 10": (
        "subsampled_gaussian",
        [{"mechanism": "subsampled_gaussian", "sigma": 2.0, "sample_rate": 0.9, "steps": 10}],
    ),
    "DP-SGD q=0.002 sigma=0.8, clip 2 x 2000": (
        "subsampled_gaussian",
        [
            {
                "mechanism": "subsampled_gaussian",
                "sigma": 1.6,
                "sensitivity": 2.0,
                "sample_rate": 0.002,
                "steps": 2000,
            }
        ],
    ),
    "pure DP 30 x 0.5": ("pure_dp", [{"mechanism": "pure_dp", "epsilon": 0.5, "count": 30}]),
    "pure DP 3 x 2": ("pure_dp", [{"mechanism": "pure_dp", "epsilon": 2.0, "count": 3}]),
    "exponential 30 x 0.5": (
        "exponential",
        [{"mechanism": "exponential", "epsilon": 0.5, "count": 30}],
    ),
    "exponential 5 x 1": (
        "exponential",
        [{"mechanism": "exponential", "epsilon": 1.0, "count": 5}],
    ),
    "approx DP 5 x (1, 1e-8)": (
        "approx_dp",
        [{"mechanism": "approx_dp", "epsilon": 1.0, "delta": 1e-8, "count": 5}],
    ),
    "approx DP 20 x (0.1, 1e-9)": (
        "approx_dp",
        [{"mechanism": "approx_dp", "epsilon": 0.1, "delta": 1e-9, "count": 20}],
    ),
    "mixed: gaussians, laplace, RR, DP-SGD": (
        "mixed",
        [
            {"mechanism": "gaussian", "sigma": 10.0, "count": 5},
            {"mechanism": "laplace", "epsilon": 0.1, "count": 20},
            {"mechanism": "randomized_response", "epsilon": 0.5, "k": 3, "count": 10},
            {"mechanism": "subsampled_gaussian", "sigma": 1.0, "sample_rate": 0.01, "steps": 200},
        ],
    ),
    "mixed: discrete kinds": (
        "mixed",
        [
            {"mechanism": "discrete_laplace", "epsilon": 0.5, "sensitivity": 2, "count": 4},
            {"mechanism": "rappor", "epsilon": 1.0, "count": 3},
            {"mechanism": "pure_dp", "epsilon": 0.3, "count": 5},
            {"mechanism": "approx_dp", "epsilon": 0.2, "delta": 1e-10, "count": 5},
        ],
    ),
}


def _rr(eps: float, k: int, pessimistic: bool) -> dpl.PrivacyLossDistribution:
    return dpl.from_randomized_response(
        k / (math.exp(eps) + k - 1), k, pessimistic_estimate=pessimistic
    )


def _approx(eps: float, delta: float, pessimistic: bool) -> dpl.PrivacyLossDistribution:
    if pessimistic:
        return dpl.from_privacy_parameters(
            common.DifferentialPrivacyParameters(eps, delta), REF_INTERVAL
        )
    # the same dominating pair, discretised optimistically
    hi = math.log1p(-delta) - math.log1p(math.exp(-eps)) if delta < 1 else -math.inf
    lo = math.log1p(-delta) - math.log1p(math.exp(eps)) if delta < 1 else -math.inf
    upper = {0: math.log(delta) if delta > 0 else -math.inf, 1: hi, 2: lo, 3: -math.inf}
    lower = {0: -math.inf, 1: lo, 2: hi, 3: math.log(delta) if delta > 0 else -math.inf}
    return dpl.from_two_probability_mass_functions(
        lower, upper, pessimistic_estimate=False, value_discretization_interval=REF_INTERVAL
    )


def _two_point_br(eta: float, t: float) -> dpl.PrivacyLossDistribution:
    """The eta-bounded-range pair with losses t and t + eta (an exponential mechanism instance
    up to relabelling), discretised optimistically: a lower bound for the worst case."""
    a = -math.expm1(t) / -math.expm1(-eta)
    upper = {0: math.log(a), 1: math.log1p(-a)}
    lower = {0: math.log(a) - (t + eta), 1: math.log1p(-a) - t}
    return dpl.from_two_probability_mass_functions(
        lower, upper, pessimistic_estimate=False, value_discretization_interval=REF_INTERVAL
    )


def _unit(entry: Entry, pessimistic: bool) -> list[tuple[dpl.PrivacyLossDistribution, int]]:
    """dp_accounting PLDs (with repetition counts) whose composition is the entry."""
    kind = entry["mechanism"]
    count = int(entry.get("count", 1))
    d = REF_INTERVAL
    if kind == "gaussian":
        p = dpl.from_gaussian_mechanism(
            entry["sigma"],
            entry.get("sensitivity", 1.0),
            pessimistic_estimate=pessimistic,
            value_discretization_interval=d,
            use_connect_dots=pessimistic,
        )
        return [(p, count)]
    if kind == "laplace":
        scale = entry["scale"] / entry.get("sensitivity", 1.0) if "scale" in entry else None
        b = scale if scale is not None else 1.0 / entry["epsilon"]
        p = dpl.from_laplace_mechanism(
            b,
            1.0,
            pessimistic_estimate=pessimistic,
            value_discretization_interval=d,
            use_connect_dots=pessimistic,
        )
        return [(p, count)]
    if kind == "discrete_laplace":
        t = entry["epsilon"] / entry["sensitivity"]
        p = dpl.from_discrete_laplace_mechanism(
            t,
            entry["sensitivity"],
            pessimistic_estimate=pessimistic,
            value_discretization_interval=d,
            use_connect_dots=pessimistic,
        )
        return [(p, count)]
    if kind == "randomized_response":
        return [(_rr(entry["epsilon"], entry.get("k", 2), pessimistic), count)]
    if kind == "rappor":
        return [(_rr(entry["epsilon"] / 2.0, 2, pessimistic), 2 * count)]
    if kind == "subsampled_gaussian":
        p = dpl.from_gaussian_mechanism(
            entry["sigma"],
            entry.get("sensitivity", 1.0),
            pessimistic_estimate=pessimistic,
            value_discretization_interval=d,
            sampling_prob=entry["sample_rate"],
            use_connect_dots=pessimistic,
        )
        return [(p, count * int(entry.get("steps", 1)))]
    if kind == "pure_dp":
        return [(_approx(entry["epsilon"], 0.0, pessimistic), count)]
    if kind == "approx_dp":
        return [(_approx(entry["epsilon"], entry["delta"], pessimistic), count)]
    raise ValueError(kind)


def reference(entries: list[Entry], pessimistic: bool) -> dpl.PrivacyLossDistribution:
    """dp_accounting's PLD of the ledger at interval 1e-4 (exponential: see ``exponential_refs``)."""
    total: dpl.PrivacyLossDistribution | None = None
    for entry in entries:
        if entry["mechanism"] == "exponential":
            # pessimistic: dp_accounting has no bounded-range PLD; its pure-DP one dominates it.
            # optimistic: the symmetric two-point BR pair (t = -eta/2), one instance of the kind
            eta = entry["epsilon"]
            units = [
                (
                    _approx(eta, 0.0, True) if pessimistic else _two_point_br(eta, -eta / 2),
                    int(entry.get("count", 1)),
                )
            ]
        else:
            units = _unit(entry, pessimistic)
        for p, n in units:
            composed = p.self_compose(n) if n > 1 else p
            total = composed if total is None else total.compose(composed)
    assert total is not None
    return total


def exponential_lower_bound(eta: float, count: int, delta: float) -> float:
    """The largest epsilon over two-point eta-BR pairs (t on a grid) composed ``count`` times,
    optimistic: every value is a lower bound on the exponential mechanism's worst case."""
    best = 0.0
    for j in range(1, 10):
        t = -eta * j / 10.0
        p = _two_point_br(eta, t)
        best = max(best, (p.self_compose(count) if count > 1 else p).get_epsilon_for_delta(delta))
    return best


def epsilons(entries: list[Entry], delta: float) -> tuple[float, float]:
    """(pessimistic, optimistic) epsilon of dp_accounting's references."""
    return (
        float(reference(entries, True).get_epsilon_for_delta(delta)),
        float(reference(entries, False).get_epsilon_for_delta(delta)),
    )
