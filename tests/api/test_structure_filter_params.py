"""An allocation's and a lifetime budget's fixed-order filter are shown as the dataset's is
(``filter_params``): an outside audit could read which order decides an allocation's admissions
only from the database. Expected values from the core's filter built for each budget alone."""

from __future__ import annotations

from fastapi.testclient import TestClient

from app.accounting.filters import Budget, Filter, FilterKind
from tests.conftest import new_dataset


def _params(epsilon: float, delta: float) -> dict[str, object]:
    f = Filter.create(FilterKind.RDP_FIXED_ORDERS, Budget(epsilon, delta))
    assert f.params is not None
    return f.params.to_dict()


def test_an_allocation_shows_the_filter_fixed_for_its_own_budget(client: TestClient) -> None:
    ds = new_dataset(client, "shown", budget={"epsilon": 8.0, "delta": 1e-6}, accounting="rdp")
    assert ds["filter"] == "rdp_fixed_orders" and ds["filter_params"] == _params(8.0, 1e-6)
    r = client.post(
        f"/v1/datasets/{ds['id']}/allocations",
        json={"name": "team", "budget": {"epsilon": 0.5, "delta": 1e-6}},
    )
    assert r.status_code == 201, r.text
    shown = r.json()["filter_params"]
    assert shown == _params(0.5, 1e-6)
    # its own order, not the dataset's (a budget 16 times smaller picks a larger order)
    assert shown["orders"] != ds["filter_params"]["orders"]
    listed = client.get(f"/v1/datasets/{ds['id']}/allocations").json()["allocations"]
    assert [a["filter_params"] for a in listed] == [shown]
    # once charged through, a budget change keeps the order and moves the thresholds, as the
    # dataset's does
    charge = {"mechanism": {"mechanism": "laplace", "epsilon": 0.1}, "allocation": "team"}
    assert client.post(f"/v1/datasets/{ds['id']}/charges", json=charge).status_code == 201
    r = client.patch(
        f"/v1/datasets/{ds['id']}/allocations/team",
        json={"budget": {"epsilon": 0.6, "delta": 1e-6}},
    )
    assert r.status_code == 200, r.text
    changed = r.json()["filter_params"]
    assert changed["orders"] == shown["orders"]
    kept = Filter.create(
        FilterKind.RDP_FIXED_ORDERS, Budget(0.6, 1e-6), orders=shown["orders"]
    ).params
    assert kept is not None and changed == kept.to_dict()


def test_a_filter_without_fixed_orders_shows_none(client: TestClient) -> None:
    ds = new_dataset(client, "plain", budget={"epsilon": 1.0, "delta": 1e-6}, adaptive=False)
    r = client.post(
        f"/v1/datasets/{ds['id']}/allocations",
        json={"name": "team", "budget": {"epsilon": 0.5, "delta": 1e-6}},
    )
    assert r.status_code == 201 and r.json()["filter_params"] is None


def test_a_lifetime_budget_shows_its_filter(client: TestClient) -> None:
    ds = new_dataset(
        client,
        "blocks",
        budget={"epsilon": 1.0, "delta": 1e-6},
        accounting="rdp",
        partition={"unit": "day"},
        lifetime_budget={"epsilon": 4.0, "delta": 1e-6},
    )
    lifetime = client.get(f"/v1/datasets/{ds['id']}/budget").json()["lifetime"]
    assert lifetime["filter_params"] == _params(4.0, 1e-6)
    assert lifetime["filter_params"] != ds["filter_params"]


def _orders_after(client: TestClient, ds: dict, use: dict | None) -> list[float]:
    """The orders of allocation "team" (created at (0.5, 1e-6)) after ``use`` (a charge or a
    hold through it, or nothing) and a budget change to (4, 1e-6)."""
    url = f"/v1/datasets/{ds['id']}"
    team = {"name": "team", "budget": {"epsilon": 0.5, "delta": 1e-6}}
    assert client.post(f"{url}/allocations", json=team).status_code == 201
    if use is not None:
        path, body = next(iter(use.items()))
        assert client.post(f"{url}/{path}", json=body).status_code == 201
    r = client.patch(f"{url}/allocations/team", json={"budget": {"epsilon": 4.0}})
    assert r.status_code == 200, r.text
    orders: list[float] = r.json()["filter_params"]["orders"]
    return orders


def test_an_unused_allocations_budget_change_chooses_its_order_again(client: TestClient) -> None:
    """Nothing was charged or held through it: its order is chosen for the new budget, as a new
    allocation's. Kept, (0.5, 1e-6) -> (4, 1e-6) stayed at alpha = 36 where a new allocation of
    (4, 1e-6) gets 6.4; once used, it is kept (its outputs may have been seen)."""
    ds = new_dataset(client, "unused", budget={"epsilon": 8.0, "delta": 1e-6})
    assert _orders_after(client, ds, None) == _params(4.0, 1e-6)["orders"]
    laplace = {"mechanism": {"mechanism": "laplace", "epsilon": 0.1}, "allocation": "team"}
    for use in ({"charges": laplace}, {"reservations": laplace}):
        other = new_dataset(client, f"used-{next(iter(use))}", budget=ds["budget"])
        assert _orders_after(client, other, use) == _params(0.5, 1e-6)["orders"]


def test_an_unused_lifetime_budgets_change_chooses_its_order_again(client: TestClient) -> None:
    ds = new_dataset(
        client,
        "blocks",
        budget={"epsilon": 1.0, "delta": 1e-6},
        partition={"unit": "day"},
        lifetime_budget={"epsilon": 1.0, "delta": 1e-6},
    )
    url = f"/v1/datasets/{ds['id']}"
    r = client.patch(url, json={"lifetime_budget": {"epsilon": 8.0}})
    assert r.status_code == 200, r.text
    lifetime = client.get(f"{url}/budget").json()["lifetime"]
    assert lifetime["filter_params"] == _params(8.0, 1e-6)
    # once charged, a change keeps the order
    charge = {"mechanism": {"mechanism": "laplace", "epsilon": 0.1}}
    charge["blocks"] = {"from": "2026-11-20", "to": "2026-11-20"}
    assert client.post(f"{url}/charges", json=charge).status_code == 201
    r = client.patch(url, json={"lifetime_budget": {"epsilon": 1.0}})
    assert r.status_code == 200, r.text
    kept = client.get(f"{url}/budget").json()["lifetime"]["filter_params"]
    assert kept["orders"] == _params(8.0, 1e-6)["orders"] != _params(1.0, 1e-6)["orders"]
