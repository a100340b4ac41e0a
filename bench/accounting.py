"""Accounting benchmark: speed from running sums vs dp_accounting, and a tightness table.

Run from the repository root: ``.venv/bin/python bench/accounting.py`` (prints JSON).

(a) Speed. A 100,000-entry mixed ledger (Gaussian, Laplace, DP-SGD runs with distinct
    parameters). Ours: per-entry curves (cached per distinct parameter set, as the service
    stores them) added into running sums with round-up arithmetic, then one ``spend()``; a
    budget query afterwards is one conversion of the stored sum. dp_accounting's
    ``RdpAccountant`` composes the same 100,000 events and converts once. Both measured in
    this run on this machine; the ratio is what to quote.
(b) Tightness at delta = 1e-6: our epsilon (non-adaptive RDP filter, method named) against
    dp_accounting's RDP and PLD accountants for several ledgers.
"""

from __future__ import annotations

import json
import math
import os
import platform
import sys
import time
from dataclasses import replace as dataclass_replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dp_accounting import dp_event  # noqa: E402
from dp_accounting.pld import pld_privacy_accountant as plda  # noqa: E402
from dp_accounting.rdp import rdp_privacy_accountant as rdpa  # noqa: E402

from app.accounting.curve import PrivacyCurve, compose  # noqa: E402
from app.accounting.filters import FilterKind, spend  # noqa: E402
from app.accounting.mechanisms import (  # noqa: E402
    Gaussian,
    Laplace,
    Mechanism,
    RandomizedResponse,
    Rappor,
    SubsampledGaussian,
)

DELTA = 1e-6
N_ENTRIES = 100_000
REL = rdpa.NeighborRel


def _event(m: Mechanism) -> dp_event.DpEvent:
    """The dp_accounting event for one of our mechanisms (count folded in)."""
    if isinstance(m, Gaussian):
        e: dp_event.DpEvent = dp_event.GaussianDpEvent(m.sigma / m.sensitivity)
    elif isinstance(m, Laplace):
        e = dp_event.LaplaceDpEvent(1.0 / m.epsilon)
    elif isinstance(m, RandomizedResponse):
        e = dp_event.RandomizedResponseDpEvent(m.k / (math.exp(m.epsilon) + m.k - 1), m.k)
    elif isinstance(m, Rappor):
        # one user's value change flips two independent bits: 2 x binary RR at eps / 2
        half = dp_event.RandomizedResponseDpEvent(2 / (math.exp(m.epsilon / 2) + 1), 2)
        e = dp_event.SelfComposedDpEvent(half, 2)
    elif isinstance(m, SubsampledGaussian):
        e = dp_event.SelfComposedDpEvent(
            dp_event.PoissonSampledDpEvent(m.sample_rate, dp_event.GaussianDpEvent(m.sigma)),
            m.steps,
        )
    else:  # pragma: no cover
        raise TypeError(m)
    return e if m.count == 1 else dp_event.SelfComposedDpEvent(e, m.count)


def _pld_event(m: Mechanism) -> dp_event.DpEvent:
    """As ``_event``, but randomized response repeated explicitly: dp_accounting 0.6.0's
    PLDAccountant ignores the count of a SelfComposedDpEvent around RandomizedResponseDpEvent
    (its RR branch composes once), which under-reports epsilon by the repetition factor."""
    if isinstance(m, RandomizedResponse | Rappor):
        unit = _event(dataclass_replace(m, count=1))
        if isinstance(unit, dp_event.SelfComposedDpEvent):  # RAPPOR: two RR bits
            unit = dp_event.ComposedDpEvent([unit.event] * unit.count)
        return dp_event.ComposedDpEvent([unit] * m.count)
    return _event(m)


def _mixed_ledger(n: int) -> list[Mechanism]:
    """n entries cycling through 60 distinct parameter sets, including 10 DP-SGD runs."""
    kinds: list[Mechanism] = []
    for i in range(30):
        kinds.append(Gaussian(sigma=20.0 + i, sensitivity=1.0))
    for i in range(20):
        kinds.append(Laplace(epsilon=0.001 * (1 + i)))
    for i in range(10):
        kinds.append(SubsampledGaussian(sigma=1.0 + 0.1 * i, sample_rate=0.001, steps=100))
    ledger = []
    for j in range(n):
        m = kinds[j % len(kinds)]
        # DP-SGD runs are rarer than queries: replace most of their slots by Gaussians
        if isinstance(m, SubsampledGaussian) and j >= len(kinds):
            m = kinds[j % 30]
        ledger.append(m)
    return ledger


def bench_speed() -> dict[str, Any]:
    ledger = _mixed_ledger(N_ENTRIES)
    t0 = time.perf_counter()
    curves = {m: m.curve() for m in set(ledger)}  # the service computes each once, at charge time
    t_curves = time.perf_counter() - t0
    t0 = time.perf_counter()
    total = PrivacyCurve.zero()
    for m in ledger:
        total = total + curves[m]
    t_compose = time.perf_counter() - t0
    t0 = time.perf_counter()
    ours = spend(FilterKind.RDP, total, DELTA)
    t_convert = time.perf_counter() - t0
    # a budget query: one conversion of the stored running sums
    reps = 200
    t0 = time.perf_counter()
    for _ in range(reps):
        spend(FilterKind.RDP, total, DELTA)
    t_query = (time.perf_counter() - t0) / reps

    acc = rdpa.RdpAccountant()
    t0 = time.perf_counter()
    for m in ledger:
        acc.compose(_event(m))
    theirs = acc.get_epsilon(DELTA)
    t_dpacc = time.perf_counter() - t0
    return {
        "entries": N_ENTRIES,
        "distinct_parameter_sets": len(curves),
        "ours_seconds": {
            "curves_of_distinct_entries": t_curves,
            "compose_running_sums": t_compose,
            "convert_once": t_convert,
            "total": t_curves + t_compose + t_convert,
            "budget_query_from_sums": t_query,
        },
        "dp_accounting_rdp_seconds": t_dpacc,
        "ratio_dp_accounting_over_ours_total": t_dpacc / (t_curves + t_compose + t_convert),
        "ratio_dp_accounting_over_ours_budget_query": t_dpacc / t_query,
        "epsilon": {"ours": ours.epsilon, "ours_method": ours.method, "dp_accounting_rdp": theirs},
    }


LEDGERS: dict[str, tuple[list[Mechanism], Any]] = {
    "gaussian: 50 x sigma=10": ([Gaussian(sigma=10.0, count=50)], REL.ADD_OR_REMOVE_ONE),
    "gaussian: 4 different sigmas": (
        [Gaussian(sigma=s) for s in (1.0, 2.0, 4.0, 8.0)],
        REL.ADD_OR_REMOVE_ONE,
    ),
    "laplace: 100 x eps=0.1": ([Laplace(epsilon=0.1, count=100)], REL.ADD_OR_REMOVE_ONE),
    "laplace: 3 x eps=0.5": ([Laplace(epsilon=0.5, count=3)], REL.ADD_OR_REMOVE_ONE),
    "binary RR: 50 x eps=0.5": ([RandomizedResponse(epsilon=0.5, count=50)], REL.REPLACE_ONE),
    "4-ary RR: 20 x eps=1": ([RandomizedResponse(epsilon=1.0, k=4, count=20)], REL.REPLACE_ONE),
    "RAPPOR: 10 x eps=2": ([Rappor(epsilon=2.0, count=10)], REL.REPLACE_ONE),
    "DP-SGD: q=0.01 sigma=1 1000 steps": (
        [SubsampledGaussian(sigma=1.0, sample_rate=0.01, steps=1000)],
        REL.ADD_OR_REMOVE_ONE,
    ),
    "mixed: DP-SGD + 20 gaussians + 10 laplace": (
        [
            SubsampledGaussian(sigma=1.1, sample_rate=0.004, steps=2000),
            Gaussian(sigma=30.0, count=20),
            Laplace(epsilon=0.05, count=10),
        ],
        REL.ADD_OR_REMOVE_ONE,
    ),
    "long: 10,000 x gaussian sigma=200": (
        [Gaussian(sigma=200.0, count=10_000)],
        REL.ADD_OR_REMOVE_ONE,
    ),
}


def bench_tightness() -> list[dict[str, Any]]:
    rows = []
    for name, (mechs, relation) in LEDGERS.items():
        curve = compose([m.curve() for m in mechs])
        ours = spend(FilterKind.RDP, curve, DELTA)
        rdp_acc = rdpa.RdpAccountant(neighboring_relation=relation)
        pld_acc = plda.PLDAccountant(neighboring_relation=relation)
        for m in mechs:
            rdp_acc.compose(_event(m))
            pld_acc.compose(_pld_event(m))
        rows.append(
            {
                "ledger": name,
                "ours": ours.epsilon,
                "ours_method": ours.method,
                "dp_accounting_rdp": rdp_acc.get_epsilon(DELTA),
                "dp_accounting_pld": pld_acc.get_epsilon(DELTA),
                "pure_dp_sum": curve.pure_eps if math.isfinite(curve.pure_eps) else None,
            }
        )
    return rows


def main() -> None:
    out = {
        "benchmark": "accounting",
        "machine": {"cores": os.cpu_count(), "python": platform.python_version()},
        "delta": DELTA,
        "speed": bench_speed(),
        "tightness": bench_tightness(),
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
