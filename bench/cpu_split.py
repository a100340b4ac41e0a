"""Where a charge's CPU goes under load: our server against the trivial-insert baseline.

Run from the repository root: ``.venv/bin/python bench/cpu_split.py [--rounds 2]
[--datasets 1]`` (prints one JSON line per measurement). PostgreSQL, 2 workers, 16 connections
on one dataset, as ``bench/service.py throughput`` (``--datasets 16``: spread over 16, as
``throughput_16_datasets``); both servers up at once, measured in turn for 4 s each. Per
request, from ``/proc`` (CPU seconds of every process, counted, not sampled): the server's
processes (``app_ms``), the PostgreSQL backends serving its database (``pg_ms``) and the load
generator (``loadgen_ms``); and ``requests_per_transaction`` from ``pg_stat_database``
(``xact_commit``): how many charges group commit (``app.db.group_commit``) ran per transaction.
The load includes its 1 s warm-up, so the per-request figures are approximate (to a few %).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
import service  # noqa: E402

WARM_UP_S = 1.0


def _pids() -> list[int]:
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]


def _group_cpu(pgid: int) -> float:
    """CPU seconds of the processes of group ``pgid`` (a server: uvicorn and its workers)."""
    total = 0.0
    for pid in _pids():
        try:
            if os.getpgid(pid) == pgid:
                total += service.proc_cpu(pid)
        except (ProcessLookupError, FileNotFoundError):
            pass
    return total


def _backend_cpu(database: str) -> float:
    """CPU seconds of the PostgreSQL backends connected to ``database``."""
    total = 0.0
    for pid in _pids():
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            if cmd.startswith("postgres: ") and f" {database} " in cmd:
                total += service.proc_cpu(pid)
        except (ProcessLookupError, FileNotFoundError, PermissionError):
            pass
    return total


def _commits(database: str) -> int:
    time.sleep(1.5)  # backends report their statistics at most once a second
    with psycopg.connect(service.PG_ADMIN_URL.replace("+psycopg", ""), autocommit=True) as c:
        row = c.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = %s", (database,)
        ).fetchone()
    return int(row[0]) if row else 0


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--datasets", type=int, default=1, help="spread the charges over this many")
    a = p.parse_args()
    tmp = Path(tempfile.mkdtemp())
    url, base_url = service._throughput_databases("postgresql", tmp)
    env = {**service.OUR_ENV, "PRIVACY_LEDGER_DATABASE_URL": url}
    ours = service.Server("app.main:app", env, 2)
    base = service.Server("baseline_app:app", {"BENCH_DATABASE_URL": base_url}, 2, cwd=tmp)
    try:
        ours.wait("/readyz")
        base.wait("/docs")
        charge = service._charge_requests(ours, a.datasets)
        servers = (
            ("ours", ours, charge, url.rsplit("/", 1)[1]),
            ("baseline", base, service.INSERT_REQUEST, base_url.rsplit("/", 1)[1]),
        )
        for _ in range(a.rounds):
            for name, server, request, database in servers:
                x0 = _commits(database)
                app0, pg0, me0 = _group_cpu(server.proc.pid), _backend_cpu(database), os.times()
                result = service.load(server.port, request, duration=4.0)
                app1, pg1, me1 = _group_cpu(server.proc.pid), _backend_cpu(database), os.times()
                n = result["requests_per_second"] * (4.0 + WARM_UP_S)
                x1 = _commits(database)
                print(
                    json.dumps(
                        {
                            "server": name,
                            "requests_per_second": round(result["requests_per_second"]),
                            "app_ms": round(1000 * (app1 - app0) / n, 3),
                            "pg_ms": round(1000 * (pg1 - pg0) / n, 3),
                            "loadgen_ms": round(
                                1000 * (me1.user + me1.system - me0.user - me0.system) / n, 3
                            ),
                            "requests_per_transaction": round(n / max(1, x1 - x0), 2),
                        }
                    ),
                    flush=True,
                )
    finally:
        ours.stop()
        base.stop()


if __name__ == "__main__":
    main()
