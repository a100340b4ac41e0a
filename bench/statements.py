"""Work per request, counted (not timed): SQL statements and round trips per charge, per budget
read and per ``GET /healthz``, and a cProfile of N charges served in-process.

Run from the repository root::

    .venv/bin/python bench/statements.py [--url URL] [--charges N] [--profile]

``--url`` defaults to a fresh SQLite file; give a PostgreSQL URL (its database is emptied and
migrated) to count there. The requests go through the ASGI app in-process (``TestClient``),
one at a time, so a charge is a group of one (group commit has nothing to combine). A round
trip is a statement, a ``BEGIN`` or a ``COMMIT`` (psycopg sends ``BEGIN`` on its own; SQLite's
``BEGIN IMMEDIATE`` is counted as a statement). Prints JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import json
import pstats
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fastapi.dependencies.utils
import fastapi.routing
import httpx
from sqlalchemy import create_engine, event, text

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fastapi.testclient import TestClient  # noqa: E402

from app.config import Settings  # noqa: E402
from app.db import migrate  # noqa: E402
from app.main import create_app  # noqa: E402

ADMIN_KEY = "bench-admin-key-0123456789-abcdefghijklmnop"
CHARGE = {"mechanism": {"mechanism": "gaussian", "sigma": 10.0}}


class Tally:
    """Statements (by first word) and transaction begins/commits seen on the engines."""

    def __init__(self) -> None:
        self.statements: Counter[str] = Counter()
        self.begins = 0
        self.commits = 0

    def reset(self) -> None:
        self.statements.clear()
        self.begins = self.commits = 0

    def attach(self, engine: Any, autocommit: bool = False) -> None:
        """Count ``engine``'s statements; its transactions unless it runs in autocommit (a
        PostgreSQL read: no BEGIN / COMMIT is sent; a SQLite read: pysqlite sends none)."""

        def real(conn: Any) -> bool:
            options = conn.get_execution_options()
            return not autocommit and options.get("isolation_level") != "AUTOCOMMIT"

        @event.listens_for(engine, "before_cursor_execute")
        def _stmt(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
            self.statements[statement.split(None, 1)[0].upper()] += 1

        @event.listens_for(engine, "begin")
        def _begin(conn: Any) -> None:
            self.begins += real(conn)

        @event.listens_for(engine, "commit")
        def _commit(conn: Any) -> None:
            self.commits += real(conn)

    def per(self, n: int, postgres: bool) -> dict[str, Any]:
        total = sum(self.statements.values())
        # psycopg sends BEGIN as its own round trip; SQLite's BEGIN IMMEDIATE is a statement
        trips = total + self.commits + (self.begins if postgres else 0)
        return {
            "statements": total / n,
            "by_kind": {k: v / n for k, v in sorted(self.statements.items())},
            "transactions": self.commits / n,
            "round_trips": trips / n,
        }


def _fresh_postgres(url: str) -> None:
    engine = create_engine(url)
    with engine.begin() as c:
        c.execute(text("DROP SCHEMA public CASCADE"))
        c.execute(text("CREATE SCHEMA public"))
    engine.dispose()


_APP_MODULES = (
    "routes/datasets.py",
    "services/charges.py",
    "services/auth.py",
    "services/admission.py",
    "services/state.py",
    "services/answers.py",
    "services/idempotency.py",
    "services/key_digest.py",
    "accounting/filters.py",
    "db/group_commit.py",
    "db/engine.py",
    "db/codec.py",
    "api/answer.py",
    "api/schemas.py",
    "app/responses.py",
)


async def _inline(func: Any, *args: Any, **kwargs: Any) -> Any:
    return func(*args, **kwargs)


def _profile(app: Any, path: str, n: int, top: int) -> dict[str, Any]:
    """cProfile of ``n`` charges through httpx's ASGI transport, with FastAPI's thread hop
    replaced by a direct call so that the whole request runs in the profiled thread."""
    hops = (fastapi.routing, fastapi.dependencies.utils)
    saved = [getattr(m, "run_in_threadpool") for m in hops]  # noqa: B009
    for m in hops:
        setattr(m, "run_in_threadpool", _inline)  # noqa: B010
    prof = cProfile.Profile()

    async def run() -> None:
        transport = httpx.ASGITransport(app=app)
        headers = {"Authorization": f"Bearer {ADMIN_KEY}"}
        async with httpx.AsyncClient(
            transport=transport, base_url="http://bench", headers=headers
        ) as ac:
            for _ in range(5):
                await ac.post(path, json=CHARGE)
            prof.enable()
            for _ in range(n):
                resp = await ac.post(path, json=CHARGE)
                assert resp.status_code == 201, resp.text
            prof.disable()

    try:
        asyncio.run(run())
    finally:
        for m, hop in zip(hops, saved, strict=True):
            setattr(m, "run_in_threadpool", hop)  # noqa: B010
    stats = pstats.Stats(prof, stream=io.StringIO())
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    rows = sorted(
        (
            (ct, nc, f"{file}:{line}({func})")
            for (file, line, func), (_c, nc, _t, ct, _) in raw.items()
        ),
        reverse=True,
    )

    def short(name: str) -> str:
        return name.split("/site-packages/")[-1].split(str(ROOT) + "/")[-1]

    def fmt(chosen: list[tuple[float, int, str]]) -> list[dict[str, Any]]:
        return [
            {"function": short(f), "cum_ms": round(1000 * ct / n, 3), "calls": round(nc / n, 2)}
            for ct, nc, f in chosen[:top]
        ]

    return {
        "charges": n,
        "function_calls_per_charge": round(stats.total_calls / n, 1),  # type: ignore[attr-defined]
        "top_cumulative": fmt(rows),
        "app_cumulative": fmt([row for row in rows if any(m in row[2] for m in _APP_MODULES)]),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default=None)
    ap.add_argument("--charges", type=int, default=200)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp()
    url = args.url or f"sqlite:///{tmp}/statements.db"
    postgres = not url.startswith("sqlite")
    if postgres:
        _fresh_postgres(url)
    migrate.upgrade(url)
    settings = Settings(
        database_url=url, admin_key=ADMIN_KEY, auto_migrate=False, log_level="WARNING"
    )
    app = create_app(settings)
    tally = Tally()
    out: dict[str, Any] = {"database": "postgresql" if postgres else "sqlite"}
    with TestClient(app) as c:
        c.headers["Authorization"] = f"Bearer {ADMIN_KEY}"
        db = app.state.db
        tally.attach(db.write_engine)
        if db.read_engine is not db.write_engine and db.read_engine.pool is not (
            db.write_engine.pool
        ):
            tally.attach(db.read_engine, autocommit=True)
        ds = c.post(
            "/v1/datasets", json={"name": "counted", "budget": {"epsilon": 1e6, "delta": 1e-6}}
        ).json()["id"]
        path = f"/v1/datasets/{ds}/charges"
        for _ in range(5):  # warm: key digest, statement caches, pool
            assert c.post(path, json=CHARGE).status_code == 201
            c.get(f"/v1/datasets/{ds}/budget")
        n = args.charges
        calls: tuple[tuple[str, Callable[[], httpx.Response]], ...] = (
            ("charge", lambda: c.post(path, json=CHARGE)),
            ("budget_read", lambda: c.get(f"/v1/datasets/{ds}/budget")),
            ("healthz", lambda: c.get("/healthz")),
        )
        for name, call in calls:
            tally.reset()
            for _ in range(n):
                resp = call()
                assert resp.status_code < 300, resp.text
            out[name] = tally.per(n, postgres)
        if args.profile:
            out["profile"] = _profile(app, path, n, args.top)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
