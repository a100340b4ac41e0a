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
from app.accounting.pld import Pld, state_for_budget  # noqa: E402
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


def main() -> None:
    report = {
        "per_charge": [per_charge(b) for b in BUDGETS],
        "mu_20_gaussian": big_gaussian(),
        "tightness": tightness(),
    }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
