"""Invariant 2: a 201 means durable. SIGKILL a server under charge load, restart, check."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import httpx

from tests.conftest import ADMIN, ADMIN_KEY
from tests.live import ROOT, Server


def test_sigkill_under_load_loses_nothing_acknowledged(db_url: str) -> None:
    server = Server(db_url, ADMIN_KEY)
    server.start()
    acknowledged: list[int] = []
    lock = threading.Lock()
    stop = threading.Event()
    try:
        with httpx.Client(base_url=server.url, headers=ADMIN, timeout=120) as c:
            ds = c.post(
                "/v1/datasets", json={"name": "crash", "budget": {"epsilon": 1e6, "delta": 1e-6}}
            ).json()

        def load() -> None:
            with httpx.Client(base_url=server.url, headers=ADMIN, timeout=120) as c:
                while not stop.is_set():
                    try:
                        r = c.post(
                            f"/v1/datasets/{ds['id']}/charges",
                            json={"mechanism": {"mechanism": "gaussian", "sigma": 50.0}},
                        )
                    except httpx.HTTPError:
                        return  # the server is gone
                    if r.status_code == 201:
                        with lock:
                            acknowledged.append(r.json()["entry"]["id"])

        threads = [threading.Thread(target=load) for _ in range(8)]
        for t in threads:
            t.start()
        # count work, not time: kill once 150 charges were acknowledged (the bound only stops a
        # hung server from hanging the suite)
        hung = time.monotonic() + 600
        while len(acknowledged) < 150 and time.monotonic() < hung:
            time.sleep(0.02)
        server.kill()  # SIGKILL mid-load: some requests are in flight
        stop.set()
        for t in threads:
            t.join(timeout=10)
    finally:
        server.kill()
        server.stop()
    assert len(acknowledged) >= 150

    restarted = Server(db_url, ADMIN_KEY)
    restarted.start()
    try:
        with httpx.Client(base_url=restarted.url, headers=ADMIN, timeout=120) as c:
            ids: set[int] = set()
            cursor = None
            while True:
                params = {"limit": 1000, **({"cursor": cursor} if cursor else {})}
                page = c.get(f"/v1/datasets/{ds['id']}/ledger", params=params).json()
                ids.update(e["id"] for e in page["entries"])
                cursor = page["next_cursor"]
                if not cursor:
                    break
            budget = c.get(f"/v1/datasets/{ds['id']}/budget").json()
    finally:
        restarted.kill()
        restarted.stop()
    assert set(acknowledged) <= ids, "an acknowledged charge was lost"
    assert budget["entries"] == len(ids)

    out = subprocess.run(
        [sys.executable, "-m", "app.cli", "verify", "--json"],
        cwd=ROOT,
        env={**os.environ, "PRIVACY_LEDGER_DATABASE_URL": db_url},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    report = json.loads(out.stdout)
    assert report["ok"] and report["datasets"][0]["entries"] == len(ids)
