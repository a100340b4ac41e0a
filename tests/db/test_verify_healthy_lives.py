"""A dataset that only ever went through the service verifies ok at every step of its life.

``verify`` compares every stored total with what the ledger implies, the stored spends
included; each path that writes a total (charge, commit, release, expiry, budget change, on
every accounting and budget structure) must store what ``verify`` recomputes, or healthy
ledgers are reported drifted and rebuilt."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.conftest import expire_active_holds, new_dataset

DAY = {"from": "2026-11-02", "to": "2026-11-04"}
CONFIGS: dict[str, dict[str, Any]] = {
    "rdp": {"adaptive": False},
    "zcdp": {"accounting": "zcdp", "adaptive": False},
    "pld": {"accounting": "pld", "adaptive": False},
    "adaptive": {"adaptive": True},
    "partitioned": {
        "adaptive": False,
        "partition": {"unit": "day"},
        "lifetime_budget": {"epsilon": 40.0, "delta": 1e-5},
    },
}


def _ok(client: TestClient, step: str) -> None:
    report = client.post("/v1/admin/verify").json()
    assert report["ok"], (step, report)


@pytest.mark.parametrize(
    ("config", "with_allocation"),
    # pld datasets have no allocations (a 422: tests/api/test_allocations.py)
    [(c, a) for c in CONFIGS for a in (False, True) if not (a and c == "pld")],
)
def test_every_step_of_a_datasets_life_verifies(
    client: TestClient, db_url: str, config: str, with_allocation: bool
) -> None:
    fields = CONFIGS[config]
    ds = new_dataset(client, budget={"epsilon": 20.0, "delta": 1e-5}, **fields)["id"]
    extra: dict[str, Any] = {"blocks": DAY} if "partition" in fields else {}
    if with_allocation:
        r = client.post(
            f"/v1/datasets/{ds}/allocations",
            json={"name": "team", "budget": {"epsilon": 10.0, "delta": 1e-5}},
        )
        assert r.status_code == 201, r.text
        extra["allocation"] = "team"
    mechanisms: list[dict[str, Any]] = [
        {"mechanism": "gaussian", "sigma": 3.0},
        {"mechanism": "laplace", "epsilon": 0.3, "count": 2},
        {"mechanism": "randomized_response", "epsilon": 0.5, "k": 3},
    ]
    if not fields.get("adaptive"):
        mechanisms.append({"mechanism": "approx_dp", "epsilon": 0.2, "delta": 1e-7})
    for m in mechanisms:
        r = client.post(f"/v1/datasets/{ds}/charges", json={"mechanism": m, **extra})
        assert r.status_code == 201, r.text
    _ok(client, "charges")

    def reserve() -> str:
        r = client.post(
            f"/v1/datasets/{ds}/reservations",
            json={"mechanism": {"mechanism": "laplace", "epsilon": 0.25}, **extra},
        )
        assert r.status_code == 201, r.text
        return str(r.json()["id"])

    committed, released, expiring = reserve(), reserve(), reserve()
    _ok(client, "holds")
    assert client.post(f"/v1/reservations/{committed}/commit").status_code in (200, 201)
    assert client.delete(f"/v1/reservations/{released}").status_code == 200
    _ok(client, "commit and release")

    expire_active_holds(db_url)  # the one active hold left: `expiring`
    r = client.post(
        f"/v1/datasets/{ds}/charges",
        json={"mechanism": {"mechanism": "gaussian", "sigma": 5.0}, **extra},
    )
    assert r.status_code == 201, r.text  # its write settled the due hold first
    assert client.get(f"/v1/reservations/{expiring}").json()["status"] != "active"
    _ok(client, "expiry")

    r = client.patch(f"/v1/datasets/{ds}", json={"budget": {"epsilon": 15.0, "delta": 2e-5}})
    assert r.status_code == 200, r.text
    if with_allocation:
        r = client.patch(
            f"/v1/datasets/{ds}/allocations/team",
            json={"budget": {"epsilon": 12.0, "delta": 2e-5}},
        )
        assert r.status_code == 200, r.text
    _ok(client, "budget changes")
