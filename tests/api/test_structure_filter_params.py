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
    # a budget change keeps the order and moves the thresholds, as the dataset's does
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
