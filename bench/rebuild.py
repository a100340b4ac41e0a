"""Benchmark: ``verify --rebuild`` of a 100,000-entry ledger (issue 12: <= 5 s).

Run from the repository root: ``.venv/bin/python bench/rebuild.py [--entries N] [--distinct]
[--partitioned SPAN]``
(prints JSON). A fresh SQLite database is migrated, one ``rdp`` dataset created through the
service, and N ledger rows bulk-inserted with SQL: a realistic mix (Gaussian, Laplace,
randomized response, DP-SGD, pure_dp, zcdp, approx_dp with a few dozen parameter sets, so
many rows repeat), or with ``--distinct`` every row a different Gaussian. The dataset's totals
are left at zero, so the verify finds drift and rebuilds them from the ledger, under the
dataset's lock, as ``privacy-ledger verify --rebuild`` does (``app.services.verification.verify``).

With ``--partitioned SPAN`` the dataset is partitioned by day and every row covers SPAN daily
blocks (starting on one of the 365 days of 2026 in turn), every other row charged to one of
four allocations: the rebuild then also recomputes every block, allocation and allocation-block
tally (``_structure_sums``), whose work was entries x SPAN curve additions before audit h2's F1.

Figures: wall and CPU seconds of the verify with rebuild, rows per second, and a second verify
(no drift left) that must report ok.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from datetime import date, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sqlalchemy import insert  # noqa: E402

from app.accounting.mechanisms import Mechanism, mechanism_from_dict  # noqa: E402
from app.db import migrate  # noqa: E402
from app.db.codec import curve_columns  # noqa: E402
from app.db.engine import Database  # noqa: E402
from app.db.models import LedgerEntry, utcnow  # noqa: E402
from app.principal import SYSTEM  # noqa: E402
from app.services import allocations, datasets  # noqa: E402
from app.services.verification import verify  # noqa: E402


def _mix(n: int, distinct: bool) -> list[Mechanism]:
    if distinct:
        return [
            mechanism_from_dict({"mechanism": "gaussian", "sigma": 50.0 + i * 1e-3})
            for i in range(n)
        ]
    base: list[dict[str, Any]] = []
    base += [{"mechanism": "gaussian", "sigma": 20.0 + 5 * i} for i in range(10)]
    base += [{"mechanism": "laplace", "epsilon": 0.001 * (i + 1)} for i in range(10)]
    base += [{"mechanism": "randomized_response", "epsilon": 0.01, "k": 2 + i} for i in range(5)]
    base += [
        {
            "mechanism": "subsampled_gaussian",
            "sigma": 1.0 + 0.1 * i,
            "sample_rate": 0.001,
            "steps": 1,
        }
        for i in range(5)
    ]
    base += [{"mechanism": "pure_dp", "epsilon": 0.001 * (i + 1)} for i in range(5)]
    base += [{"mechanism": "zcdp", "rho": 1e-6 * (i + 1)} for i in range(5)]
    base += [{"mechanism": "approx_dp", "epsilon": 0.001, "delta": 1e-13}]
    ms = [mechanism_from_dict(b) for b in base]
    return [ms[i % len(ms)] for i in range(n)]


def _structures(i: int, span: int, allocations: list[str]) -> dict[str, Any]:
    """Row ``i``'s allocation (every other row, the four in turn) and its ``span`` days."""
    first = date(2026, 1, 1) + timedelta(days=i % 365)
    return {
        "allocation_id": allocations[(i // 2) % len(allocations)] if i % 2 else None,
        "block_from": first.isoformat(),
        "block_to": (first + timedelta(days=span - 1)).isoformat(),
    }


def _fill(
    db: Database,
    dataset_id: str,
    mechanisms: list[Mechanism],
    span: int = 0,
    allocations: list[str] | None = None,
) -> None:
    now = utcnow()
    curves: dict[Mechanism, dict[str, Any]] = {}
    rows = []
    for i, m in enumerate(mechanisms):
        cols = curves.get(m)
        if cols is None:
            cols = curves[m] = curve_columns(m.curve())
        rows.append(
            {
                "dataset_id": dataset_id,
                "seq": i + 1,
                "created_at": now,
                "kind": m.kind,
                "mechanism": {**m.to_dict(), "v": 1},
                "count": m.count,
                **cols,
                "label": None,
                "metadata_": None,
                "key_id": None,
                "source": "charge",
                "reservation_id": None,
                "spent_epsilon": 0.0,
                **(_structures(i, span, allocations or []) if span else {}),
            }
        )
    with db.write() as s:
        for start in range(0, len(rows), 10_000):
            s.execute(insert(LedgerEntry), rows[start : start + 10_000])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--distinct", action="store_true")
    parser.add_argument("--partitioned", type=int, default=0, metavar="SPAN")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="pl-rebuild-") as tmp:
        url = f"sqlite:///{tmp}/rebuild.db"
        migrate.upgrade(url)
        db = Database(url)
        ds = datasets.create_dataset(
            db,
            SYSTEM,
            name="big",
            budget_epsilon=1e6,
            budget_delta=1e-6,
            adaptive=False,
            partition_unit="day" if args.partitioned else None,
        )
        teams = [
            allocations.create_allocation(
                db, SYSTEM, ds.id, name=f"team-{k}", epsilon=1e6, delta=1e-6
            ).id
            for k in range(4 if args.partitioned else 0)
        ]
        _fill(db, ds.id, _mix(args.entries, args.distinct), args.partitioned, teams)
        progress: list[tuple[int, int]] = []
        wall, cpu = time.perf_counter(), time.process_time()
        report = verify(
            db, SYSTEM, rebuild=True, progress=lambda done, total: progress.append((done, total))
        )
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        again = verify(db, SYSTEM)
        print(
            json.dumps(
                {
                    "backend": "sqlite",
                    "entries": args.entries,
                    "ledger": "distinct" if args.distinct else "realistic",
                    "partitioned_span_days": args.partitioned or None,
                    "allocations": len(teams),
                    "drift_rebuilt": len(report.datasets[0].drift),
                    "rebuilt": bool((report.datasets[0].model_extra or {}).get("rebuilt")),
                    "seconds": round(wall, 3),
                    "cpu_seconds": round(cpu, 3),
                    "rows_per_second": round(args.entries / wall),
                    "progress_calls": len(progress),
                    "ok_after": again.ok,
                },
                indent=2,
            )
        )
        db.dispose()


if __name__ == "__main__":
    main()
