"""Issue 16 item 2: ``state`` is ok / warning / exhausted, one rule (docs/operations.md).

warning: the spend with holds reaches ``warning_threshold`` x the budget epsilon; exhausted:
the filter says so, or what remains is below 1e-9 x the budget epsilon.
"""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.conftest import new_dataset

LAPLACE = {"mechanism": {"mechanism": "laplace", "epsilon": 0.1}}


def _rule(b: dict[str, Any], threshold: float, spent_with_holds: float) -> str:
    eps_b = b["budget"]["epsilon"]
    if b["remaining"]["epsilon"] < 1e-9 * eps_b or spent_with_holds >= eps_b:
        return "exhausted"
    return "warning" if spent_with_holds >= threshold * eps_b else "ok"


def test_state_follows_the_spend_until_exhausted(client: TestClient) -> None:
    ds = new_dataset(client, adaptive=False)
    url = f"/v1/datasets/{ds['id']}"
    assert ds["state"] == "ok" and ds["warning_threshold"] == 0.8
    r = client.patch(url, json={"warning_threshold": 0.5})
    assert r.status_code == 200 and r.json()["warning_threshold"] == 0.5
    seen = []
    while client.post(f"{url}/charges", json=LAPLACE).status_code == 201:
        b = client.get(f"{url}/budget").json()
        assert b["state"] == _rule(b, 0.5, b["spent"]["epsilon"])
        assert client.get(url).json()["state"] == b["state"]
        seen.append(b["state"])
    assert seen[0] == "ok" and "warning" in seen
    assert seen == sorted(seen, key=["ok", "warning", "exhausted"].index)
    # lowering the budget below the spend: exhausted by the filter's rule
    spent = client.get(f"{url}/budget").json()["spent"]["epsilon"]
    low = client.patch(url, json={"budget": {"epsilon": spent / 2}}).json()
    assert low["state"] == "exhausted" and low["exhausted"] is True


def test_remaining_below_tolerance_is_exhausted(client: TestClient) -> None:
    ds = new_dataset(client, adaptive=False)
    url = f"/v1/datasets/{ds['id']}"
    assert client.post(f"{url}/charges", json=LAPLACE).status_code == 201
    spent = client.get(f"{url}/budget").json()["spent"]["epsilon"]
    # a budget a hair above the spend: the filter alone would call it within budget
    b = client.patch(url, json={"budget": {"epsilon": spent * (1 + 1e-12)}}).json()
    assert 0 < b["remaining"]["epsilon"] < 1e-9 * b["budget"]["epsilon"]
    assert b["state"] == "exhausted"
    assert client.get(f"{url}/budget").json()["state"] == "exhausted"


def test_holds_count_toward_the_warning(client: TestClient) -> None:
    ds = new_dataset(client, adaptive=False)
    url = f"/v1/datasets/{ds['id']}"
    client.patch(url, json={"warning_threshold": 0.3})
    hold = {"mechanism": {"mechanism": "laplace", "epsilon": 0.5}, "ttl_seconds": 600}
    assert client.post(f"{url}/reservations", json=hold).status_code == 201
    b = client.get(f"{url}/budget").json()
    with_holds = b["spent"]["epsilon"] + b["reserved"]["epsilon"]
    assert b["spent"]["epsilon"] < 0.3 * b["budget"]["epsilon"] <= with_holds
    assert b["state"] == _rule(b, 0.3, with_holds) == "warning"


@pytest.mark.parametrize("bad", [0, -0.1, 1.5, "nan", "x"])
def test_threshold_out_of_range_is_422(client: TestClient, bad: Any) -> None:
    ds = new_dataset(client)
    r = client.patch(f"/v1/datasets/{ds['id']}", json={"warning_threshold": bad})
    assert r.status_code == 422, r.text
    assert client.get(f"/v1/datasets/{ds['id']}").json()["warning_threshold"] == 0.8


def test_threshold_change_is_admin_and_audited(client: TestClient) -> None:
    ds = new_dataset(client)
    viewer = client.post("/v1/keys", json={"role": "pipeline"}).json()
    url = f"/v1/datasets/{ds['id']}"
    them = {"Authorization": f"Bearer {viewer['key']}"}
    assert client.patch(url, json={"warning_threshold": 0.9}, headers=them).status_code == 403
    assert client.patch(url, json={"warning_threshold": 1}).json()["warning_threshold"] == 1.0
    events = client.get("/v1/audit", params={"dataset": ds["id"]}).json()["events"]
    changed = [e for e in events if e["action"] == "dataset.changed"]
    assert changed[0]["details"]["changes"]["warning_threshold"] == {"old": 0.8, "new": 1.0}
