"""Admission filters compared: charges admitted before the first refusal (issue 13, item 2).

Run from the repository root: ``.venv/bin/python bench/filters.py`` (prints JSON; a few
minutes, most of it in the PLD column). Workloads: tests/unit/filter_workloads.py (Gaussian
sigma ~ U[20, 100], Laplace 0.01, DP-SGD steps q = 0.01 sigma = 1, and a mixed cycle), at
epsilon = 1, 3, 8 and delta = 1e-6. Filters:

* adaptive (valid when parameters are chosen after seeing outputs):
  ``rdp_union_bound`` (today's default: classic conversion, union over all grid orders),
  ``one_order_gaussian`` (one order, the Gaussian-capacity optimum, improved conversion),
  ``three_orders_classic`` (three orders around it, classic tail form at delta / 3),
  ``three_orders_improved`` (the same orders, weighted improved conversion, equal weights),
  ``recommended`` (``adaptive.choose_filter``), ``zcdp_filter``, and ``gdp`` (Gaussian
  workload only: the Gaussian-DP filter of a Gaussian-only dataset);
* non-adaptive: ``rdp`` (today's tightest RDP filter) and ``pld`` (this branch's PLD).

Admission is monotone in the prefix (every filter's summary only grows), so the count is found
by doubling and bisection on prefix totals rather than charge by charge.

A second section sweeps DP-SGD settings (the workload whose best order moves most): steps
admitted by ``recommended`` against the non-adaptive ``rdp`` filter for six (sigma, q) pairs,
epsilon 1, 3, 8, 20 and delta 1e-6, 1e-9.
"""

from __future__ import annotations

import json
import math
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.accounting import adaptive, pld_mechanisms  # noqa: E402
from app.accounting import filters as F  # noqa: E402
from app.accounting.curve import PrivacyCurve  # noqa: E402
from app.accounting.mechanisms import mechanism_from_dict  # noqa: E402
from app.accounting.orders import ORDERS  # noqa: E402
from app.accounting.pld import Pld, interval_for_budget  # noqa: E402
from tests.unit import filter_workloads as W  # noqa: E402

DELTA = 1e-6
BUDGETS = (1.0, 3.0, 8.0)
TARGETS = {"gaussian": 0.85, "laplace": 0.85, "mixed": 0.85, "dpsgd": 0.60}

Predicate = Callable[[PrivacyCurve], bool]


def total_pld(workload: str, n: int, interval: float) -> Pld:
    """The PLD of the first ``n`` charges (the Gaussians as one, which is exact)."""
    sigmas, others = W.prefix(workload, n)
    total = Pld.identity(interval)
    if sigmas.size:
        mu = math.sqrt(math.fsum((1.0 / sigmas**2).tolist()))
        total = total.compose(pld_mechanisms.gaussian(1.0 / mu, interval=interval))
    for params, count in others.items():
        entry = dict(params)
        entry["count"] = count
        total = total.compose(pld_mechanisms.for_mechanism(entry, interval=total.interval))
    return total


def classic_few_orders(eps: float, delta: float, orders: list[float]) -> Predicate:
    """Union over a few orders, classic tail form (docs/formulas.md §2.6): delta / k per order."""
    idx = [int(np.flatnonzero(ORDERS == a)[0]) for a in orders]
    limits = [eps - (math.log(len(orders)) - math.log(delta)) / (a - 1.0) for a in orders]

    def admits(c: PrivacyCurve) -> bool:
        return c.pure_eps <= eps or any(c.rdp[i] <= t for i, t in zip(idx, limits, strict=True))

    return admits


def three_orders_around(order: float) -> list[float]:
    """Grid orders nearest to 1 + (order - 1) x {0.8, 1, 1.25}."""
    wanted = [1.0 + (order - 1.0) * f for f in (0.8, 1.0, 1.25)]
    return [float(ORDERS[int(np.argmin(np.abs(ORDERS - w)))]) for w in wanted]


def filter_predicates(eps: float, workload: str) -> dict[str, Predicate]:
    budget = F.Budget(eps, DELTA)
    a_gauss = float(ORDERS[int(np.argmax(adaptive.gaussian_capacity(eps, DELTA)))])
    few = three_orders_around(a_gauss)
    one = adaptive.RenyiFilter.create(eps, DELTA, [a_gauss], [1.0])
    three = adaptive.RenyiFilter.create(eps, DELTA, few)
    recommended = adaptive.choose_filter(eps, DELTA)
    zcdp_bound = F.filter_bound(F.FilterKind.ZCDP_FILTER, budget)
    preds: dict[str, Predicate] = {
        "rdp_union_bound": lambda c: F.admits(F.FilterKind.RDP_UNION_BOUND, budget, c),
        "one_order_gaussian": lambda c: one.admits(c.rdp, c.pure_eps),
        "three_orders_classic": classic_few_orders(eps, DELTA, few),
        "three_orders_improved": lambda c: three.admits(c.rdp, c.pure_eps),
        "recommended": lambda c: recommended.admits(c.rdp, c.pure_eps),
        "zcdp_filter": lambda c: F.admits(F.FilterKind.ZCDP_FILTER, budget, c, zcdp_bound),
        "rdp": lambda c: F.admits(F.FilterKind.RDP, budget, c),
    }
    if workload == "gaussian":
        gdp_bound = F.filter_bound(F.FilterKind.GDP, budget)
        preds["gdp"] = lambda c: F.admits(F.FilterKind.GDP, budget, c, gdp_bound)
    return preds


def measure(eps: float, workload: str) -> dict[str, Any]:
    counts: dict[str, int] = {}
    for name, pred in filter_predicates(eps, workload).items():

        def admits(n: int, pred: Predicate = pred) -> bool:
            return pred(W.total_curve(workload, n))

        counts[name] = W.count_admitted(admits)
    interval = interval_for_budget(eps, DELTA)
    t0 = time.perf_counter()
    counts["pld"] = W.count_admitted(
        lambda n: total_pld(workload, n, interval).delta(eps) <= DELTA,
        start=max(1, counts["rdp"]),
    )
    pld_seconds = time.perf_counter() - t0
    rdp = counts["rdp"]
    ratio = counts["recommended"] / rdp if rdp else None
    return {
        "counts": counts,
        "recommended_over_rdp": ratio,
        "one_order_gaussian_over_rdp": counts["one_order_gaussian"] / rdp if rdp else None,
        "target": TARGETS[workload] if eps in (3.0, 8.0) else None,
        "meets_target": None
        if eps not in (3.0, 8.0) or ratio is None
        else ratio >= TARGETS[workload],
        "recommended_filter": adaptive.choose_filter(eps, DELTA).to_dict(),
        "pld_search_seconds": round(pld_seconds, 1),
    }


SWEEP_SETTINGS = ((0.7, 0.005), (0.9, 0.001), (1.0, 0.01), (1.5, 0.02), (2.0, 0.05), (4.0, 0.1))


def dpsgd_sweep() -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for delta in (1e-6, 1e-9):
        for eps in (1.0, 3.0, 8.0, 20.0):
            budget = F.Budget(eps, delta)
            chosen = adaptive.choose_filter(eps, delta)
            for sigma, q in SWEEP_SETTINGS:
                step = mechanism_from_dict(
                    {
                        "mechanism": "subsampled_gaussian",
                        "sigma": sigma,
                        "sample_rate": q,
                        "steps": 1,
                    }
                ).curve()

                def rdp_admits(
                    n: int, step: PrivacyCurve = step, budget: F.Budget = budget
                ) -> bool:
                    return F.admits(F.FilterKind.RDP, budget, step.scaled(n))

                def ours_admits(
                    n: int, step: PrivacyCurve = step, chosen: adaptive.RenyiFilter = chosen
                ) -> bool:
                    total = step.scaled(n)
                    return chosen.admits(total.rdp, total.pure_eps)

                rdp = W.count_admitted(rdp_admits, limit=10**8)
                ours = W.count_admitted(ours_admits, limit=10**8)
                rows.append(
                    {
                        "epsilon": eps,
                        "delta": delta,
                        "sigma": sigma,
                        "sample_rate": q,
                        "order": chosen.orders[0],
                        "recommended": ours,
                        "rdp": rdp,
                        "ratio": ours / rdp if rdp else None,
                    }
                )
    return rows


def main() -> None:
    results: dict[str, Any] = {}
    for eps in BUDGETS:
        results[f"epsilon={eps:g}"] = {w: measure(eps, w) for w in W.WORKLOADS}
    report = {
        "delta": DELTA,
        "machine": {"python": platform.python_version(), "cpus": platform.machine()},
        "results": results,
        "dpsgd_sweep": dpsgd_sweep(),
    }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
