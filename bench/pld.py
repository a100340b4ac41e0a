"""PLD accounting benchmark: per-charge cost, state memory, and tightness against dp_accounting.

Run from the repository root: ``.venv/bin/python bench/pld.py`` (prints JSON, about a minute).

(a) Per charge: a dataset with budget (8, 1e-6), and one with (8, 1e-9) whose state composes
    in long double (``state_for_budget``), receives 1,000 charges cycling over 20 distinct
    parameter sets (every kind); each charge
    builds (or takes from the cache) the entry's PLD and convolves it into the stored state,
    the work the service does inside its transaction. Reported: p50 / p90 / max of that, in
    wall time and in thread CPU time (the machine is shared: CPU time is what to quote when the
    load average, also reported, is above the core count),
    constructions (cache misses), the state's grid points and serialised bytes, and the cost
    of serialising, of delta(eps_B) (admission) and of epsilon(delta_B) (a budget read).
(b) The mu = 20 Gaussian (sigma 0.05) that took more than 8 GB at interval 1e-4: grid points,
    interval chosen, time and peak traced memory.
(c) Tightness: our epsilon at delta = 1e-6 on the 25 fixed-parameter ledgers of
    tests/unit/pld_ledgers.py against dp_accounting's pessimistic and optimistic PLDs at 1e-4,
    and the worst ratio per category.
(d) ``work`` (alone: ``.venv/bin/python bench/pld.py work``): the worst accepted case of the
    per-request work limit (``pld_mechanisms.PLD_WORK_LIMIT``). Per family, the largest count
    (or DP-SGD steps) whose construction fits the limit, found by doubling then bisection on
    the counted work, then built once from an empty cache: its counted work and process CPU
    time; and the CPU a refused construction (count 10^9) spends before it stops.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.accounting import pld_mechanisms as pm  # noqa: E402
from app.accounting.pld import Pld, PldWork, PldWorkExceeded, state_for_budget  # noqa: E402
from tests.unit import pld_ledgers as L  # noqa: E402

DELTA = 1e-6
BUDGETS = ((8.0, 1e-6), (8.0, 1e-9))  # the second composes in long double (extended)

PARAMETER_SETS: list[dict[str, Any]] = [
    *({"mechanism": "gaussian", "sigma": s} for s in (20.0, 30.0, 40.0, 50.0, 60.0, 80.0, 100.0)),
    *({"mechanism": "laplace", "epsilon": e} for e in (0.01, 0.02, 0.05)),
    {"mechanism": "randomized_response", "epsilon": 0.05, "k": 2},
    {"mechanism": "randomized_response", "epsilon": 0.1, "k": 4},
    {"mechanism": "rappor", "epsilon": 0.1},
    {"mechanism": "discrete_laplace", "epsilon": 0.05, "sensitivity": 2},
    {"mechanism": "subsampled_gaussian", "sigma": 2.0, "sample_rate": 0.01, "steps": 10},
    {"mechanism": "subsampled_gaussian", "sigma": 4.0, "sample_rate": 0.02, "steps": 5},
    {"mechanism": "pure_dp", "epsilon": 0.02},
    {"mechanism": "exponential", "epsilon": 0.05},
    {"mechanism": "approx_dp", "epsilon": 0.02, "delta": 1e-12},
    {"mechanism": "gaussian", "sigma": 25.0, "count": 3},
]


def _ms(seconds: float) -> float:
    return round(seconds * 1000.0, 2)


def per_charge(budget: tuple[float, float]) -> dict[str, Any]:
    pm.clear_cache()
    state = state_for_budget(*budget)
    charge_s: list[float] = []
    charge_cpu_s: list[float] = []
    for i in range(1000):
        c0, t0 = time.thread_time(), time.perf_counter()
        entry = pm.for_mechanism(PARAMETER_SETS[i % len(PARAMETER_SETS)], interval=state.interval)
        state = state.compose(entry)
        charge_s.append(time.perf_counter() - t0)
        charge_cpu_s.append(time.thread_time() - c0)
    n_sets = len(PARAMETER_SETS)  # every parameter set was constructed once in the first cycle
    steady, steady_cpu = charge_s[n_sets:], charge_cpu_s[n_sets:]
    t0 = time.perf_counter()
    blob = state.to_bytes()
    t1 = time.perf_counter()
    back = Pld.from_bytes(blob)
    t2 = time.perf_counter()
    admitted = state.delta(budget[0]) <= budget[1]
    t3 = time.perf_counter()
    spent = state.epsilon(budget[1])
    t4 = time.perf_counter()
    tracemalloc.start()
    entry = pm.for_mechanism(PARAMETER_SETS[0], interval=state.interval)
    state.compose(entry)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {
        "budget": {"epsilon": budget[0], "delta": budget[1]},
        "extended": state.extended,
        "entries": 1000,
        "distinct_parameter_sets": len(PARAMETER_SETS),
        "interval": state.interval,
        "constructions": pm.cache_info().misses,
        "charge_wall_ms": {
            "p50": _ms(statistics.median(steady)),
            "p90": _ms(sorted(steady)[int(0.9 * len(steady))]),
            "max": _ms(max(steady)),
            "first_cycle_max_incl_construction": _ms(max(charge_s[:n_sets])),
        },
        "charge_cpu_ms": {
            "p50": _ms(statistics.median(steady_cpu)),
            "p90": _ms(sorted(steady_cpu)[int(0.9 * len(steady_cpu))]),
            "max": _ms(max(steady_cpu)),
        },
        "load_average_1min": os.getloadavg()[0],
        "state": {
            "grid_points": state.size,
            "serialised_bytes": len(blob),
            "infinity_mass": max(state.remove.infinity_mass, state.add_pmf.infinity_mass),
            "round_trip_exact": back == state,
            "to_bytes_ms": _ms(t1 - t0),
            "from_bytes_ms": _ms(t2 - t1),
        },
        "admission_delta_at_budget_ms": _ms(t3 - t2),
        "budget_read_epsilon_ms": _ms(t4 - t3),
        "spent_epsilon": spent,
        "within_budget": admitted,
        "peak_traced_bytes_one_charge": peak,
    }


def big_gaussian() -> dict[str, Any]:
    pm.clear_cache()
    tracemalloc.start()
    t0 = time.perf_counter()
    p = pm.gaussian(0.05, 1.0)
    seconds = time.perf_counter() - t0
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    pm.clear_cache()
    return {
        "mu": 20.0,
        "interval": p.interval,
        "grid_points": p.size,
        "seconds": round(seconds, 2),
        "peak_traced_bytes": peak,
        "epsilon_at_1e-6": p.epsilon(DELTA),
    }


def tightness() -> dict[str, Any]:
    rows: dict[str, Any] = {}
    worst: dict[str, float] = {}
    for name, (category, entries) in L.LEDGERS.items():
        pm.clear_cache()
        t0 = time.perf_counter()
        ours = pm.compose_all(entries).epsilon(DELTA)
        seconds = time.perf_counter() - t0
        pess, opt = L.epsilons(entries, DELTA)
        ratio = ours / pess
        rows[name] = {
            "category": category,
            "ours": ours,
            "dp_accounting_pessimistic": pess,
            "dp_accounting_optimistic": opt,
            "ratio_to_pessimistic": ratio,
            "above_optimistic": ours >= opt,
            "seconds": round(seconds, 2),
        }
        worst[category] = max(worst.get(category, 0.0), ratio)
    return {"ledgers": rows, "worst_ratio_per_category": worst}


WORK_FAMILIES: dict[str, tuple[dict[str, Any], str]] = {
    "laplace eps 0.1": ({"mechanism": "laplace", "epsilon": 0.1}, "count"),
    "exponential eps 1": ({"mechanism": "exponential", "epsilon": 1.0}, "count"),
    "randomized_response eps 1, k 7": (
        {"mechanism": "randomized_response", "epsilon": 1.0, "k": 7},
        "count",
    ),
    "discrete_laplace eps 1, sensitivity 10^4": (
        {"mechanism": "discrete_laplace", "epsilon": 1.0, "sensitivity": 10_000},
        "count",
    ),
    "discrete_laplace eps 1, sensitivity 999,986": (
        {"mechanism": "discrete_laplace", "epsilon": 1.0, "sensitivity": 999_986},
        "count",
    ),
    "subsampled_gaussian sigma 2, q 0.01": (
        {"mechanism": "subsampled_gaussian", "sigma": 2.0, "sample_rate": 0.01},
        "steps",
    ),
    "subsampled_gaussian sigma 0.999, q 0.5": (
        {"mechanism": "subsampled_gaussian", "sigma": 0.999, "sample_rate": 0.5},
        "steps",
    ),
}


def _fits(entry: dict[str, Any]) -> bool:
    try:
        pm.for_mechanism(entry, work=PldWork(pm.PLD_WORK_LIMIT))
    except PldWorkExceeded:
        return False
    return True


def _largest_fitting(base: dict[str, Any], field: str) -> int | None:
    lo, hi = 0, 1
    while hi <= 10**9 and _fits({**base, field: hi}):
        lo, hi = hi, hi * 2
    if lo == 0:
        return None
    hi = min(hi, 10**9 + 1)
    while hi - lo > max(1, lo // 64):  # within 1.6 %
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if _fits({**base, field: mid}) else (lo, mid)
    return lo


def work() -> dict[str, Any]:
    rows = {}
    for name, (base, field) in WORK_FAMILIES.items():
        n = _largest_fitting(base, field)
        row: dict[str, Any] = {field: n}
        if n is not None:
            pm.clear_cache()
            meter = PldWork()
            t = time.process_time()
            pm.for_mechanism({**base, field: n}, work=meter)
            row |= {"work": meter.spent, "cpu_s": round(time.process_time() - t, 3)}
        pm.clear_cache()
        t = time.process_time()
        try:
            pm.for_mechanism({**base, field: 10**9}, work=PldWork(pm.PLD_WORK_LIMIT))
        except PldWorkExceeded:
            row["refused_1e9_cpu_s"] = round(time.process_time() - t, 3)
        rows[name] = row
    accepted = [r["cpu_s"] for r in rows.values() if "cpu_s" in r]
    return {
        "limit": pm.PLD_WORK_LIMIT,
        "load_average": os.getloadavg(),
        "families": rows,
        "worst_accepted_cpu_s": max(accepted),
        "worst_refused_cpu_s": max(r.get("refused_1e9_cpu_s", 0.0) for r in rows.values()),
    }


def main() -> None:
    if sys.argv[1:] == ["work"]:
        print(json.dumps({"work": work()}, indent=1))
        return
    report = {
        "per_charge": [per_charge(b) for b in BUDGETS],
        "mu_20_gaussian": big_gaussian(),
        "tightness": tightness(),
        "work": work(),
    }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
