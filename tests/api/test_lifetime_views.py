"""A time-partitioned dataset with a lifetime budget: every view of its spend (the charge's
answer, /budget, /spend, /curves, the dataset) describes the same composition of all its charges
under the lifetime budget's filter, at the lifetime budget's delta, and counts active holds
where the admission does. A random search found /spend and /curves using the per-block filter
(an epsilon below the lifetime filter's, at an order no filter guarded), `spent.delta` showing
the block delta, and `remaining` ignoring the holds the admission counts."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from tests.conftest import new_dataset

GAUSS = {"mechanism": "gaussian", "sigma": 6.0}


def _charge(client: TestClient, ds: str, day: str, mechanism: dict[str, Any]) -> Any:
    r = client.post(
        f"/v1/datasets/{ds}/charges",
        json={"mechanism": mechanism, "blocks": {"from": day, "to": day}},
    )
    assert r.status_code == 201, r.text
    return r.json()


def test_every_view_states_the_lifetime_spend_at_the_lifetime_delta(client: TestClient) -> None:
    ds = new_dataset(
        client,
        budget={"epsilon": 1.0, "delta": 1e-6},
        partition={"unit": "day"},
        lifetime_budget={"epsilon": 4.0, "delta": 1e-9},
    )  # adaptive rdp: fixed-order filters, the lifetime's order chosen for its own budget
    u = f"/v1/datasets/{ds['id']}"
    for day in ("2026-11-01", "2026-11-02", "2026-11-03"):
        answer = _charge(client, ds["id"], day, GAUSS)
    spent = answer["spent"]
    assert spent["delta"] == 1e-9
    budget = client.get(f"{u}/budget").json()
    assert budget["spent"]["epsilon"] == spent["epsilon"]
    assert budget["spent"]["delta"] == 1e-9
    assert budget["lifetime"]["spent"]["delta"] == 1e-9
    assert client.get(u).json()["spent"]["delta"] == 1e-9

    at = client.get(f"{u}/spend", params={"delta": 1e-9}).json()
    assert at["epsilon"] == spent["epsilon"]  # was 1.715 < 2.502: the block filter's order
    back = client.get(f"{u}/spend", params={"epsilon": spent["epsilon"]}).json()
    assert 0.99e-9 <= back["delta"] <= 1e-9  # was 3e-16

    curves = client.get(f"{u}/curves").json()
    assert curves["budget"] == {"epsilon": 4.0, "delta": 1e-9}
    assert curves["spent"]["epsilon"] == spent["epsilon"]
    assert [t["epsilon"] for t in curves["tradeoff"] if t["delta"] == 1e-9] == [spent["epsilon"]]


def test_remaining_and_reserved_count_the_holds_the_admission_counts(client: TestClient) -> None:
    ds = new_dataset(
        client,
        budget={"epsilon": 1.0, "delta": 1e-3},
        accounting="rdp",
        adaptive=False,
        partition={"unit": "day"},
        lifetime_budget={"epsilon": 5.0, "delta": 1e-10},
    )
    u = f"/v1/datasets/{ds['id']}"
    _charge(client, ds["id"], "2026-11-01", {"mechanism": "gaussian", "sigma": 5.0})
    before = client.get(f"{u}/budget").json()
    hold = client.post(
        f"{u}/reservations",
        json={
            "mechanism": {"mechanism": "gaussian", "sigma": 5.0},
            "ttl_seconds": 600,
            "blocks": {"from": "2026-11-02", "to": "2026-11-02"},
        },
    )
    assert hold.status_code == 201, hold.text
    held = client.get(f"{u}/budget").json()
    assert held["remaining"] == held["lifetime"]["remaining"]
    assert held["remaining"]["epsilon"] < before["remaining"]["epsilon"]
    assert held["reserved"]["epsilon"] > 0.0  # was 0.0: two filters' spends compared

    assert client.post(f"/v1/reservations/{hold.json()['id']}/commit").status_code == 200
    after = client.get(f"{u}/budget").json()
    # a commit turns the hold into an entry: the remaining budget does not move, and the spend
    # grows by what `reserved` announced
    assert abs(after["remaining"]["epsilon"] - held["remaining"]["epsilon"]) <= 1e-12
    growth = after["spent"]["epsilon"] - before["spent"]["epsilon"]
    assert abs(growth - held["reserved"]["epsilon"]) <= 1e-12


def test_a_charge_above_what_remains_after_holds_is_refused(client: TestClient) -> None:
    ds = new_dataset(
        client,
        accounting="rdp",
        adaptive=False,
        partition={"unit": "day"},
        lifetime_budget={"epsilon": 2.0, "delta": 1e-6},
    )
    u = f"/v1/datasets/{ds['id']}"
    _charge(client, ds["id"], "2026-11-01", {"mechanism": "laplace", "epsilon": 0.5})
    hold = client.post(
        f"{u}/reservations",
        json={
            "mechanism": {"mechanism": "laplace", "epsilon": 0.9},
            "ttl_seconds": 600,
            "blocks": {"from": "2026-11-02", "to": "2026-11-02"},
        },
    )
    assert hold.status_code == 201, hold.text
    view = client.get(u).json()
    left = view["remaining"]["epsilon"]
    assert left < 0.61  # was 1.5: the hold of 0.9 was not counted
    body = {"blocks": {"from": "2026-11-03", "to": "2026-11-03"}}
    refused = client.post(
        f"{u}/charges",
        params={"dry_run": "true"},
        json={"mechanism": {"mechanism": "laplace", "epsilon": 1.0}, **body},
    )
    assert refused.status_code == 409 and refused.json()["limit"] == "lifetime"
    # the 409's spent composes all charges: the lifetime budget is beside the per-block one
    assert refused.json()["lifetime_budget"] == {"epsilon": 2.0, "delta": 1e-6}
    assert refused.json()["budget"] == {"epsilon": 1.0, "delta": 1e-5}
    # pure-DP entries: the spend is at most their sum, so what remains after the holds fits
    fits = client.post(
        f"{u}/charges",
        params={"dry_run": "true"},
        json={"mechanism": {"mechanism": "laplace", "epsilon": left * (1 - 1e-9)}, **body},
    )
    assert fits.status_code == 200, fits.text
