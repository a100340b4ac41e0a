"""CPU profile and statement count of one request, through the whole ASGI app, in one thread.

Run from the repository root (prints JSON; ``--top N`` adds the top functions by cumulative
CPU per request)::

    .venv/bin/python bench/profile_charge.py [--url postgresql+psycopg://...] [--requests 300]

The app is built with ``create_app`` and driven by direct ASGI calls; the thread pool that
serves sync endpoints is replaced by an inline call, so that cProfile (which follows one
thread) sees the middleware, the endpoint and the database work of every request. Statements
are counted with SQLAlchemy's ``before_cursor_execute`` event, transactions with the engine's
``begin`` / ``commit`` events; the figures are per request, averaged over ``--requests``.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import json
import os
import pstats
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import anyio.to_thread
from sqlalchemy import event

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.config import Settings  # noqa: E402
from app.main import create_app  # noqa: E402

ADMIN_KEY = "bench-admin-key-0123456789-abcdefghijklmnop"


async def _inline(func: Any, *args: Any, **_kw: Any) -> Any:
    return func(*args)


anyio.to_thread.run_sync = _inline  # type: ignore[assignment]


async def call(
    app: Any, method: str, path: str, body: dict[str, Any] | None = None
) -> tuple[int, bytes]:
    data = json.dumps(body).encode() if body is not None else b""
    raw_path, _, query = path.partition("?")
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": raw_path,
        "raw_path": raw_path.encode(),
        "query_string": query.encode(),
        "root_path": "",
        "headers": [
            (b"host", b"127.0.0.1"),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(data)).encode()),
            (b"authorization", f"Bearer {ADMIN_KEY}".encode()),
        ],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
    }
    sent = False
    status = 0
    out = bytearray()

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if sent:
            await asyncio.sleep(3600)
        sent = True
        return {"type": "http.request", "body": data, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        elif message["type"] == "http.response.body":
            out.extend(message.get("body", b""))

    await app(scope, receive, send)
    return status, bytes(out)


def _baseline_app(url: str) -> Any:
    """bench/service.py's trivial-insert app, on ``url``."""
    sys.path.insert(0, str(ROOT / "bench"))
    import service  # noqa: PLC0415 - the benchmark script, not an app module

    os.environ["BENCH_DATABASE_URL"] = url
    namespace: dict[str, Any] = {}
    exec(compile(service.BASELINE_APP, "baseline_app", "exec"), namespace)  # noqa: S102
    return namespace["app"]


async def _cpu(app: Any, method: str, path: str, body: Any, n: int) -> float:
    """CPU milliseconds per request, without the profiler."""
    for _ in range(20):
        await call(app, method, path, body)
    cpu0 = time.process_time()
    for _ in range(n):
        status, out = await call(app, method, path, body)
    assert status < 300, out
    return 1000 * (time.process_time() - cpu0) / n


def _count(db: Any) -> Counter[str]:
    counts: Counter[str] = Counter()
    for engine in {db.write_engine, db.read_engine.engine}:

        @event.listens_for(engine, "before_cursor_execute")
        def _stmt(_c: Any, _cur: Any, sql: str, *_a: Any) -> None:
            counts[sql.split(None, 1)[0].upper()] += 1

        @event.listens_for(engine, "begin")
        def _begin(_c: Any) -> None:
            counts["BEGIN (tx)"] += 1

        @event.listens_for(engine, "commit")
        def _commit(_c: Any) -> None:
            counts["COMMIT (tx)"] += 1

    return counts


async def run(url: str, n: int, top: int) -> dict[str, Any]:
    os.environ["PRIVACY_LEDGER_ADMIN_KEY"] = ADMIN_KEY
    settings = Settings(database_url=url, admin_key=ADMIN_KEY, log_level="WARNING")
    app = create_app(settings)
    out: dict[str, Any] = {"url": url.split("@")[-1], "requests": n}
    async with app.router.lifespan_context(app):
        status, body = await call(
            app,
            "POST",
            "/v1/datasets",
            {"name": f"prof-{time.time_ns()}", "budget": {"epsilon": 1e6, "delta": 1e-6}},
        )
        assert status == 201, body
        ds = json.loads(body)["id"]
        charge = {"mechanism": {"mechanism": "gaussian", "sigma": 10.0}}
        cases = {
            "charge": ("POST", f"/v1/datasets/{ds}/charges", charge),
            "budget": ("GET", f"/v1/datasets/{ds}/budget", None),
            "healthz": ("GET", "/healthz", None),
        }
        counts = _count(app.state.db)
        for name, (method, path, req) in cases.items():
            for _ in range(20):  # warm caches (statement cache, digest, imports)
                await call(app, method, path, req)
            counts.clear()
            prof = cProfile.Profile(time.process_time)
            cpu0 = time.process_time()
            prof.enable()
            for _ in range(n):
                status, body = await call(app, method, path, req)
            prof.disable()
            cpu = time.process_time() - cpu0
            assert status < 300, body
            case: dict[str, Any] = {
                "cpu_ms_per_request": 1000 * cpu / n,
                "per_request": {k: v / n for k, v in sorted(counts.items())},
            }
            if top:
                s = io.StringIO()
                pstats.Stats(prof, stream=s).sort_stats("cumulative").print_stats(top)
                case["profile"] = s.getvalue().splitlines()
            case["cpu_ms_per_request_unprofiled"] = await _cpu(app, method, path, req, n)
            out[name] = case
    base_url = url.rsplit("/", 1)[0] + "/profile_baseline.db" if url.startswith("sqlite") else url
    out["baseline_insert_cpu_ms_unprofiled"] = await _cpu(
        _baseline_app(base_url), "POST", "/insert", charge, n
    )
    out["cpu_ratio_baseline_over_charge"] = (
        out["baseline_insert_cpu_ms_unprofiled"] / out["charge"]["cpu_ms_per_request_unprofiled"]
    )
    return out


def server_cpu(url: str, n: int) -> dict[str, Any]:
    """CPU milliseconds per request of a real server (uvicorn, 1 worker: one process), requests
    sent one after another on one keep-alive connection (no grouping); thread hops included."""
    import httpx

    sys.path.insert(0, str(ROOT / "bench"))
    import service  # noqa: PLC0415 - the benchmark script, not an app module

    out: dict[str, Any] = {}
    ours = service.Server(
        "app.main:app", {**service.OUR_ENV, "PRIVACY_LEDGER_DATABASE_URL": url}, 1
    )
    try:
        ours.wait("/readyz")
        headers = {"Authorization": f"Bearer {ADMIN_KEY}"}
        with httpx.Client(base_url=ours.url, headers=headers) as c:
            ds = c.post(
                "/v1/datasets",
                json={"name": f"cpu-{time.time_ns()}", "budget": {"epsilon": 1e6, "delta": 1e-6}},
            ).json()["id"]
            charge = {"mechanism": {"mechanism": "gaussian", "sigma": 10.0}}
            for name, method, path, body in (
                ("charge", "POST", f"/v1/datasets/{ds}/charges", charge),
                ("budget", "GET", f"/v1/datasets/{ds}/budget", None),
                ("healthz", "GET", "/healthz", None),
            ):
                for _ in range(20):
                    c.request(method, path, json=body)
                cpu0 = service.proc_cpu(ours.proc.pid)
                for _ in range(n):
                    r = c.request(method, path, json=body)
                    assert r.status_code < 300, r.text
                out[name] = 1000 * (service.proc_cpu(ours.proc.pid) - cpu0) / n
    finally:
        ours.stop()
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--url", default=None)
    p.add_argument("--requests", type=int, default=300)
    p.add_argument("--top", type=int, default=0)
    p.add_argument(
        "--server", action="store_true", help="only the CPU per request of a real server"
    )
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = a.url or f"sqlite:///{tmp}/profile.db"
        if a.server:
            print(json.dumps({"server_cpu_ms_per_request": server_cpu(url, a.requests)}))
            return
        result = asyncio.run(run(url, a.requests, a.top))
    top = {k: v.pop("profile", None) for k, v in result.items() if isinstance(v, dict)}
    print(json.dumps(result, indent=2))
    for name, lines in top.items():
        if lines:
            print(f"\n===== {name} =====")
            print("\n".join(lines))


if __name__ == "__main__":
    main()
