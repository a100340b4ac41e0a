"""Service benchmark: charge throughput vs a trivial-insert baseline, and read latency.

Run from the repository root: ``.venv/bin/python bench/service.py`` (prints JSON);
``bench/service.py partitioned`` (or any of ``SCENARIOS``) runs only those scenarios.

* ``throughput_alternated``: the same one-dataset comparison with both servers up at once,
  measured in turn (7 pairs of 4 s): each pair's ratio and their median, less at the mercy of
  the machine's load drifting between two 8 s measurements a minute apart.
* Throughput: 16 concurrent keep-alive HTTP connections POST charges to a running server
  (uvicorn[standard]: uvloop + httptools); SQLite with 1 worker, PostgreSQL with 2. The
  baseline is a trivial FastAPI app defined here, served the same way, whose endpoint does
  one single-row insert transaction per request on the same kind of database. The ratio
  ours / baseline is the figure to quote (both measured in this run, on this machine).
* PLD charges (``pld`` scenario): per-charge latency on an ``accounting: "pld"`` dataset whose
  ledger grows to 1,000 entries over 20 distinct parameter sets (every kind with a PLD); the
  stored PLD is convolved with one entry per charge (issue 13: p50 <= 50 ms).
* Reads: GET /v1/datasets/{id}/budget, and the dashboard's /series?points=400 and /curves,
  latency with 10 and with 100,000 ledger entries (the 100k ledger is bulk-inserted with SQL,
  then totals are rebuilt from it with ``privacy-ledger verify --rebuild``); the ratios should
  be about 1 (O(1) in the ledger length; the series costs O(points)).

* Partitioned (issue 15): charges/s on a daily-partitioned dataset whose charges each cover 7
  blocks (overlapping ranges), against a plain dataset on the same server in the same run.

The load generator is a small asyncio HTTP/1.1 client in a separate process; client and server
share the machine's cores, which the JSON records.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

ADMIN_KEY = "bench-admin-key-0123456789-abcdefghijklmnop"
CONNECTIONS = 16
# like the baseline (uvicorn --no-access-log), no access line per request: the comparison is
# of the request path itself
OUR_ENV = {"PRIVACY_LEDGER_ADMIN_KEY": ADMIN_KEY, "PRIVACY_LEDGER_LOG_LEVEL": "WARNING"}
DURATION = 8.0
PG_ADMIN_URL = os.environ.get(
    "PRIVACY_LEDGER_BENCH_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
# the databases the script (re)creates are named <prefix>_ours, _baseline, _reads
PG_PREFIX = os.environ.get("PRIVACY_LEDGER_BENCH_DB_PREFIX", "pl_bench")

BASELINE_APP = """
import os, threading
from fastapi import FastAPI
from sqlalchemy import create_engine, event, text
URL = os.environ["BENCH_DATABASE_URL"]
if URL.startswith("sqlite"):
    engine = create_engine(URL, connect_args={"check_same_thread": False, "timeout": 30}, pool_size=20)
    @event.listens_for(engine, "connect")
    def _pragmas(conn, _):
        conn.execute("PRAGMA journal_mode=WAL"); conn.execute("PRAGMA synchronous=FULL")
else:
    engine = create_engine(URL, pool_size=20, max_overflow=20)
with engine.begin() as c:
    c.execute(text("CREATE TABLE IF NOT EXISTS bench_event (id INTEGER PRIMARY KEY %s, payload TEXT)"
                   % ("" if URL.startswith("sqlite") else "GENERATED ALWAYS AS IDENTITY")))
app = FastAPI()
@app.post("/insert", status_code=201)
def insert(body: dict) -> dict:
    with engine.begin() as c:
        c.execute(text("INSERT INTO bench_event (payload) VALUES (:p)"), {"p": str(body)})
    return {"ok": True}
"""


def proc_cpu(pid: int) -> float:
    """CPU seconds (user + system, every thread) of process ``pid``, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    def __init__(self, app: str, env: dict[str, str], workers: int, cwd: Path = ROOT) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = [
            sys.executable,
            "-m",
            "uvicorn",
            app,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--workers",
            str(workers),
            "--loop",
            "uvloop",
            "--http",
            "httptools",
            "--log-level",
            "warning",
            "--no-access-log",
        ]
        self.proc = subprocess.Popen(
            cmd,
            cwd=cwd,
            env={**os.environ, **env},
            stdout=subprocess.DEVNULL,
            # a file, not a pipe: an unread pipe fills up and blocks the server's logging
            stderr=tempfile.TemporaryFile(),  # noqa: SIM115 - lives as long as the process
            start_new_session=True,
        )

    def wait(self, path: str) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.url + path, timeout=1).status_code < 500:
                    return
            except httpx.HTTPError:
                time.sleep(0.1)
        raise RuntimeError("server did not start")

    def stop(self) -> None:
        import signal

        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)


async def _connection(
    port: int, request: bytes, until: float, latencies: list[float], codes: dict[int, int]
) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        while time.perf_counter() < until:
            t0 = time.perf_counter()
            writer.write(request)
            status_line = await reader.readline()
            length = 0
            while True:
                line = await reader.readline()
                if line in (b"\r\n", b""):
                    break
                name, _, value = line.decode().partition(":")
                if name.lower() == "content-length":
                    length = int(value)
            await reader.readexactly(length)
            latencies.append(time.perf_counter() - t0)
            code = int(status_line.split()[1])
            codes[code] = codes.get(code, 0) + 1
    finally:
        writer.close()


def _request(method: str, path: str, body: dict[str, Any] | None, auth: bool) -> bytes:
    data = json.dumps(body).encode() if body is not None else b""
    head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n"
    if auth:
        head += f"Authorization: Bearer {ADMIN_KEY}\r\n"
    return (head + "\r\n").encode() + data


def load(
    port: int,
    request: bytes | list[bytes],
    connections: int = CONNECTIONS,
    duration: float = DURATION,
) -> dict[str, Any]:
    """Run the load in a fresh event loop; returns throughput and latency percentiles.

    ``request`` is sent over every connection, or, given a list, connection i sends
    ``request[i % len(request)]`` (e.g. one dataset per connection)."""
    latencies: list[float] = []
    codes: dict[int, int] = {}
    requests = request if isinstance(request, list) else [request]

    async def main() -> float:
        warm_until = time.perf_counter() + 1.0
        await asyncio.gather(
            *[
                _connection(port, requests[i % len(requests)], warm_until, [], {})
                for i in range(connections)
            ]
        )
        t0 = time.perf_counter()
        until = t0 + duration
        await asyncio.gather(
            *[
                _connection(port, requests[i % len(requests)], until, latencies, codes)
                for i in range(connections)
            ]
        )
        return time.perf_counter() - t0

    elapsed = asyncio.run(main())
    lat = sorted(latencies)
    return {
        "requests_per_second": len(lat) / elapsed,
        "status_codes": codes,
        "latency_ms": {
            "p50": 1000 * lat[len(lat) // 2],
            "p99": 1000 * lat[int(len(lat) * 0.99)],
        },
    }


def _pg_database(name: str) -> str:
    from sqlalchemy import create_engine, text

    engine = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with engine.connect() as c:
        c.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        c.execute(text(f"CREATE DATABASE {name}"))
    engine.dispose()
    return PG_ADMIN_URL.rsplit("/", 1)[0] + "/" + name


CHARGE_BODY = {"mechanism": {"mechanism": "gaussian", "sigma": 10.0}}


def _throughput_databases(kind: str, tmp: Path) -> tuple[str, str]:
    """Fresh databases for our server and for the baseline (and the baseline's app file)."""
    if kind == "sqlite":
        for stale in tmp.glob("*.db*"):
            stale.unlink()
    (tmp / "baseline_app.py").write_text(BASELINE_APP)
    if kind == "sqlite":
        return f"sqlite:///{tmp / 'ours.db'}", f"sqlite:///{tmp / 'baseline.db'}"
    return _pg_database(f"{PG_PREFIX}_ours"), _pg_database(f"{PG_PREFIX}_baseline")


def _charge_requests(ours: Server, datasets: int) -> list[bytes]:
    """A charge request on each of ``datasets`` new datasets of our server."""
    with httpx.Client(base_url=ours.url, headers={"Authorization": f"Bearer {ADMIN_KEY}"}) as c:
        ids = [
            c.post(
                "/v1/datasets",
                json={"name": f"bench-{i}", "budget": {"epsilon": 1e6, "delta": 1e-6}},
            ).json()["id"]
            for i in range(datasets)
        ]
    return [_request("POST", f"/v1/datasets/{ds}/charges", CHARGE_BODY, auth=True) for ds in ids]


INSERT_REQUEST = _request("POST", "/insert", CHARGE_BODY, auth=False)


def throughput(
    kind: str, tmp: Path, workers: int | None = None, datasets: int = 1
) -> dict[str, Any]:
    """Charges/s of our server against the trivial-insert baseline, same workers, in one run;
    the connections spread their charges over ``datasets`` datasets (1: all on one dataset,
    the worst case, serialised by its lock)."""
    workers = workers or (1 if kind == "sqlite" else 2)
    url, base_url = _throughput_databases(kind, tmp)
    ours = Server("app.main:app", {**OUR_ENV, "PRIVACY_LEDGER_DATABASE_URL": url}, workers)
    try:
        ours.wait("/readyz")
        ours_result = load(ours.port, _charge_requests(ours, datasets))
    finally:
        ours.stop()
    base = Server("baseline_app:app", {"BENCH_DATABASE_URL": base_url}, workers, cwd=tmp)
    try:
        base.wait("/docs")
        base_result = load(base.port, INSERT_REQUEST)
    finally:
        base.stop()
    return {
        "workers": workers,
        "datasets": datasets,
        "ours_charges": ours_result,
        "baseline_single_insert": base_result,
        "ratio_ours_over_baseline": ours_result["requests_per_second"]
        / base_result["requests_per_second"],
    }


ALTERNATED_PAIRS = 7
ALTERNATED_DURATION = 4.0


def throughput_alternated(kind: str, tmp: Path, workers: int | None = None) -> dict[str, Any]:
    """``throughput`` on one dataset, both servers up at once and measured in turn (ours, then
    the baseline, ``ALTERNATED_PAIRS`` times, ``ALTERNATED_DURATION`` s each): the ratio of each
    pair, and their median. On a shared machine the load of other jobs drifts over a minute;
    a pair measured within seconds of each other sees nearly the same machine."""
    workers = workers or (1 if kind == "sqlite" else 2)
    url, base_url = _throughput_databases(kind, tmp)
    ours = Server("app.main:app", {**OUR_ENV, "PRIVACY_LEDGER_DATABASE_URL": url}, workers)
    base = Server("baseline_app:app", {"BENCH_DATABASE_URL": base_url}, workers, cwd=tmp)
    pairs: list[dict[str, float]] = []
    try:
        ours.wait("/readyz")
        base.wait("/docs")
        charge = _charge_requests(ours, 1)
        for _ in range(ALTERNATED_PAIRS):
            a = load(ours.port, charge, duration=ALTERNATED_DURATION)
            b = load(base.port, INSERT_REQUEST, duration=ALTERNATED_DURATION)
            assert set(a["status_codes"]) == {201}, a["status_codes"]
            pairs.append(
                {
                    "ours": a["requests_per_second"],
                    "baseline": b["requests_per_second"],
                    "ratio": a["requests_per_second"] / b["requests_per_second"],
                }
            )
    finally:
        ours.stop()
        base.stop()
    return {
        "workers": workers,
        "pairs": pairs,
        "median_ratio": statistics.median(p["ratio"] for p in pairs),
    }


def partitioned(kind: str, tmp: Path, span: int = 7) -> dict[str, Any]:
    """Charges/s on a daily-partitioned dataset, each charge over ``span`` blocks (ranges that
    overlap between connections), against a plain dataset, same server, same run (issue 15)."""
    workers = 1 if kind == "sqlite" else 2
    if kind == "sqlite":
        for stale in tmp.glob("*.db*"):
            stale.unlink()
    url = (
        f"sqlite:///{tmp / 'partitioned.db'}" if kind == "sqlite" else _pg_database("pl_bench_part")
    )
    server = Server("app.main:app", {**OUR_ENV, "PRIVACY_LEDGER_DATABASE_URL": url}, workers)
    charge = {"mechanism": {"mechanism": "gaussian", "sigma": 10.0}}
    try:
        server.wait("/readyz")
        with httpx.Client(
            base_url=server.url, headers={"Authorization": f"Bearer {ADMIN_KEY}"}
        ) as c:
            budget = {"epsilon": 1e6, "delta": 1e-6}
            plain = c.post("/v1/datasets", json={"name": "plain", "budget": budget}).json()["id"]
            part = c.post(
                "/v1/datasets",
                json={"name": "daily", "budget": budget, "partition": {"unit": "day"}},
            ).json()["id"]
        plain_result = load(
            server.port, _request("POST", f"/v1/datasets/{plain}/charges", charge, auth=True)
        )
        reqs = [
            _request(
                "POST",
                f"/v1/datasets/{part}/charges",
                {
                    **charge,
                    "blocks": {
                        "from": f"2026-11-{1 + i % 10:02d}",
                        "to": f"2026-11-{i % 10 + span:02d}",
                    },
                },
                auth=True,
            )
            for i in range(CONNECTIONS)
        ]
        part_result = load(server.port, reqs)
    finally:
        server.stop()
    return {
        "workers": workers,
        "span_blocks": span,
        "plain_dataset": plain_result,
        "partitioned_dataset": part_result,
        "ratio_partitioned_over_plain": part_result["requests_per_second"]
        / plain_result["requests_per_second"],
    }


def _bulk_fill(url: str, dataset_id: str, n: int) -> None:
    """Insert n ledger rows of one Gaussian charge with SQL, then rebuild totals from them."""
    from sqlalchemy import create_engine, insert

    from app.accounting.mechanisms import Gaussian
    from app.accounting.orders import ORDERS_VERSION
    from app.db.codec import rdp_to_bytes
    from app.db.models import LedgerEntry, utcnow

    m = Gaussian(sigma=1000.0)
    c = m.curve()
    now = utcnow()
    rows = [
        {
            "dataset_id": dataset_id,
            "seq": i + 1,
            "created_at": now,
            "kind": "gaussian",
            "mechanism": {**m.to_dict(), "v": 1},
            "count": 1,
            "rho": c.rho,
            "rdp": rdp_to_bytes(c.rdp),
            "pure_eps": c.pure_eps,
            "gaussian_only": True,
            "orders_version": ORDERS_VERSION,
            "label": None,
            "metadata_": None,
            "key_id": None,
            "source": "charge",
            "reservation_id": None,
            "spent_epsilon": 0.0,
        }
        for i in range(n)
    ]
    engine = create_engine(url)
    with engine.begin() as conn:
        for start in range(0, n, 10_000):
            conn.execute(insert(LedgerEntry), rows[start : start + 10_000])
    engine.dispose()
    env = {**os.environ, "PRIVACY_LEDGER_DATABASE_URL": url}
    subprocess.run(
        [sys.executable, "-m", "app.cli", "verify", "--rebuild"],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
    )


READ_ENDPOINTS = {
    "healthz": "/healthz",
    "budget": "/v1/datasets/{id}/budget",
    "dashboard_series": "/v1/datasets/{id}/series?points=400",
    "dashboard_curves": "/v1/datasets/{id}/curves",
}
READ_ROUNDS = 300


def budget_latency(kind: str, tmp: Path) -> dict[str, Any]:
    url = (
        f"sqlite:///{tmp / 'reads.db'}" if kind == "sqlite" else _pg_database(f"{PG_PREFIX}_reads")
    )
    server = Server(
        "app.main:app",
        {**OUR_ENV, "PRIVACY_LEDGER_DATABASE_URL": url},
        1,
    )
    try:
        server.wait("/readyz")
        with httpx.Client(
            base_url=server.url, headers={"Authorization": f"Bearer {ADMIN_KEY}"}
        ) as c:
            small = c.post(
                "/v1/datasets", json={"name": "small", "budget": {"epsilon": 1e6, "delta": 1e-6}}
            ).json()
            large = c.post(
                "/v1/datasets", json={"name": "large", "budget": {"epsilon": 1e6, "delta": 1e-6}}
            ).json()
            for _ in range(10):
                c.post(
                    f"/v1/datasets/{small['id']}/charges",
                    json={"mechanism": {"mechanism": "gaussian", "sigma": 1000.0}},
                )
    finally:
        server.stop()
    _bulk_fill(url, large["id"], 100_000)
    server = Server(
        "app.main:app",
        {**OUR_ENV, "PRIVACY_LEDGER_DATABASE_URL": url},
        1,
    )
    try:
        server.wait("/readyz")
        out: dict[str, Any] = {}
        with httpx.Client(
            base_url=server.url, headers={"Authorization": f"Bearer {ADMIN_KEY}"}
        ) as c:
            for ds in (small, large):
                assert c.get(f"/v1/datasets/{ds['id']}/budget").json()["entries"] in (10, 100_000)
            # interleave sizes and endpoints to share any drift in machine load
            lat: dict[str, dict[str, list[float]]] = {
                ep: {"10_entries": [], "100000_entries": []} for ep in READ_ENDPOINTS
            }
            for _ in range(READ_ROUNDS):
                for ep, path in READ_ENDPOINTS.items():
                    for name, ds in (("10_entries", small), ("100000_entries", large)):
                        t0 = time.perf_counter()
                        r = c.get(path.format(id=ds["id"]))
                        lat[ep][name].append(time.perf_counter() - t0)
                        assert r.status_code == 200, r.text
        for ep, sizes in lat.items():
            out[ep] = {}
            for name, xs in sizes.items():
                xs.sort()
                out[ep][name] = {
                    "p50_ms": 1000 * statistics.median(xs),
                    "p99_ms": 1000 * xs[int(len(xs) * 0.99)],
                }
            out[ep]["ratio_p50_100000_over_10"] = (
                out[ep]["100000_entries"]["p50_ms"] / out[ep]["10_entries"]["p50_ms"]
            )
        # a budget read against the cheapest request the server answers, same run, same client
        out["budget_p50_over_healthz_p50"] = (
            out["budget"]["10_entries"]["p50_ms"] / out["healthz"]["10_entries"]["p50_ms"]
        )
        return out
    finally:
        server.stop()


PLD_PARAMETER_SETS: list[dict[str, Any]] = [
    *(
        {"mechanism": "gaussian", "sigma": s, "sensitivity": 1.0}
        for s in (60.0, 80.0, 100.0, 150.0)
    ),
    *({"mechanism": "laplace", "epsilon": e} for e in (0.002, 0.004, 0.006)),
    *(
        {"mechanism": "randomized_response", "epsilon": e, "k": k}
        for e, k in ((0.005, 2), (0.004, 5))
    ),
    *({"mechanism": "rappor", "epsilon": e} for e in (0.004, 0.008)),
    *({"mechanism": "discrete_laplace", "epsilon": e, "sensitivity": 2} for e in (0.003, 0.005)),
    *(
        {"mechanism": "subsampled_gaussian", "sigma": s, "sample_rate": q, "steps": 5}
        for s, q in ((4.0, 0.001), (5.0, 0.002), (6.0, 0.001))
    ),
    *({"mechanism": "gaussian", "sigma": s, "sensitivity": 2.0} for s in (120.0, 200.0)),
    *({"mechanism": "laplace", "scale": b, "sensitivity": 1.0} for b in (300.0, 500.0)),
]
PLD_ENTRIES = 1_000
PLD_MEASURED = 200  # the last charges, ledger between 800 and 1,000 entries


def pld_charge_latency(tmp: Path) -> dict[str, Any]:
    """Sequential charges on a ``pld`` dataset (SQLite, 1 worker): latency of the last
    ``PLD_MEASURED`` of ``PLD_ENTRIES``, and of a budget read at the end."""
    assert len(PLD_PARAMETER_SETS) == 20
    url = f"sqlite:///{tmp / 'pld.db'}"
    server = Server("app.main:app", {**OUR_ENV, "PRIVACY_LEDGER_DATABASE_URL": url}, 1)
    try:
        server.wait("/readyz")
        with httpx.Client(
            base_url=server.url, headers={"Authorization": f"Bearer {ADMIN_KEY}"}, timeout=60
        ) as c:
            ds = c.post(
                "/v1/datasets",
                json={
                    "name": "pld",
                    "budget": {"epsilon": 8.0, "delta": 1e-6},
                    "accounting": "pld",
                    "adaptive": False,
                },
            ).json()
            charges, cpu0 = [], time.process_time()
            for i in range(PLD_ENTRIES):
                body = {"mechanism": PLD_PARAMETER_SETS[i % len(PLD_PARAMETER_SETS)]}
                t0 = time.perf_counter()
                r = c.post(f"/v1/datasets/{ds['id']}/charges", json=body)
                charges.append(time.perf_counter() - t0)
                assert r.status_code == 201, r.text
            reads = []
            for _ in range(20):
                t0 = time.perf_counter()
                budget = c.get(f"/v1/datasets/{ds['id']}/budget")
                reads.append(time.perf_counter() - t0)
            assert budget.json()["entries"] == PLD_ENTRIES
        last = sorted(charges[-PLD_MEASURED:])
        return {
            "entries": PLD_ENTRIES,
            "distinct_parameter_sets": len(PLD_PARAMETER_SETS),
            "charge_p50_ms": 1000 * statistics.median(last),
            "charge_p90_ms": 1000 * last[int(0.9 * len(last))],
            "budget_read_p50_ms": 1000 * statistics.median(reads),
            "epsilon_spent": budget.json()["spent"]["epsilon"],
            "client_cpu_seconds": time.process_time() - cpu0,
        }
    finally:
        server.stop()


SCENARIOS = (
    "throughput",
    "throughput_alternated",
    "throughput_16_datasets",
    "read_latency",
    "pld",
    "partitioned",
)


def main() -> None:
    """``bench/service.py [scenario ...]`` (default: all of SCENARIOS)."""
    chosen = sys.argv[1:] or list(SCENARIOS)
    unknown = set(chosen) - set(SCENARIOS)
    if unknown:
        raise SystemExit(f"unknown scenario(s) {sorted(unknown)}; choose from {SCENARIOS}")
    tmp = Path(tempfile.mkdtemp(prefix="pl-bench-"))
    result: dict[str, Any] = {
        "benchmark": "service",
        "machine": {
            "cores": os.cpu_count(),
            "note": "load generator and server share these cores",
        },
        "connections": CONNECTIONS,
        "duration_seconds": DURATION,
    }
    try:
        if "throughput" in chosen:
            result["throughput"] = {
                kind: throughput(kind, tmp) for kind in ("sqlite", "postgresql")
            }
        if "throughput_alternated" in chosen:
            result["throughput_alternated"] = {
                kind: throughput_alternated(kind, tmp) for kind in ("sqlite", "postgresql")
            }
        if "throughput_16_datasets" in chosen:
            result["throughput_16_datasets"] = {
                f"postgresql_{w}_workers": throughput("postgresql", tmp, workers=w, datasets=16)
                for w in (2, 4)
            }
        if "read_latency" in chosen:
            result["read_latency"] = {
                kind: budget_latency(kind, tmp) for kind in ("sqlite", "postgresql")
            }
        if "pld" in chosen:
            result["pld_charges"] = pld_charge_latency(tmp)
        if "partitioned" in chosen:
            result["partitioned_7_blocks"] = {
                kind: partitioned(kind, tmp) for kind in ("sqlite", "postgresql")
            }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
