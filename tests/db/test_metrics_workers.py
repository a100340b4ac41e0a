"""With several uvicorn workers and PROMETHEUS_MULTIPROC_DIR, /metrics sums every worker."""

from __future__ import annotations

from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.live import running

ADMIN_KEY = "metrics-admin-key-0123456789-abcdefghijklmnop"


def _admitted(text: str, dataset: str) -> float:
    total = 0.0
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if (
                s.name == "privacy_ledger_charges_total"
                and s.labels.get("dataset") == dataset
                and s.labels.get("outcome") == "admitted"
            ):
                total += s.value
    return total


def test_two_workers_report_one_sum(tmp_path: Path) -> None:
    metrics_dir = tmp_path / "metrics"
    metrics_dir.mkdir()
    env = {"PROMETHEUS_MULTIPROC_DIR": str(metrics_dir)}
    with running(f"sqlite:///{tmp_path / 'w.db'}", ADMIN_KEY, workers=2, env=env) as server:
        h = {"Authorization": f"Bearer {ADMIN_KEY}"}
        # a fresh connection per request so that both workers take some of them
        ds = httpx.post(
            server.url + "/v1/datasets",
            json={"name": "w", "budget": {"epsilon": 10.0, "delta": 1e-6}},
            headers=h,
            timeout=120,
        ).json()
        for _ in range(20):
            r = httpx.post(
                server.url + f"/v1/datasets/{ds['id']}/charges",
                json={"mechanism": {"mechanism": "laplace", "epsilon": 0.01}},
                headers=h,
                timeout=120,
            )
            assert r.status_code == 201
        # whichever worker answers the scrape, it reports all 20
        for _ in range(6):
            assert _admitted(httpx.get(server.url + "/metrics", timeout=120).text, ds["id"]) == 20
    assert any(metrics_dir.iterdir())  # the workers wrote their counters there
