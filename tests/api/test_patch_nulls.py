"""PATCH and ``null``: a member left out keeps its value; ``null`` is a value only where the field
may be null (a dataset's ``description`` and ``allowed_mechanisms``). An explicit ``null`` for
any other member, or an empty budget object, is a 422 naming it and changes nothing (it was a
200 that changed nothing and audited nothing, hiding a client that serialised a missing value
as null)."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.conftest import new_dataset
from tests.snapshot import Watcher, changed_tables

DATASET_NULLS = [
    ({"name": None}, "name"),
    ({"budget": None}, "budget"),
    ({"budget": {"epsilon": None}}, "budget.epsilon"),
    ({"budget": {"delta": None}}, "budget.delta"),
    ({"budget": {"epsilon": None, "delta": None}}, "budget.epsilon"),
    ({"budget": {"epsilon": 2.0, "delta": None}}, "budget.delta"),
    ({"budget": {}}, "budget"),
    ({"accounting": None}, "accounting"),
    ({"adaptive": None}, "adaptive"),
    ({"warning_threshold": None}, "warning_threshold"),
    ({"lifetime_budget": None}, "lifetime_budget"),
    ({"lifetime_budget": {"epsilon": None}}, "lifetime_budget.epsilon"),
    ({"lifetime_budget": {}}, "lifetime_budget"),
    ({"description": "kept", "name": None}, "name"),
]
ALLOCATION_NULLS = [
    ({"budget": None}, "budget"),
    ({"budget": {"epsilon": None}}, "budget.epsilon"),
    ({"budget": {"delta": None}}, "budget.delta"),
    ({"budget": {}}, "budget"),
]


def _refused(client: TestClient, url: str, body: dict[str, Any], field: str) -> None:
    r = client.patch(url, json=body)
    assert r.status_code == 422, (body, r.text)
    problem = r.json()
    assert problem["detail"].startswith(f"{field}: "), (body, problem)
    if "cannot be null" not in problem["detail"]:
        assert "give epsilon, delta or both" in problem["detail"], (body, problem)


def test_null_in_a_dataset_member_that_cannot_be_null_is_422(
    client: TestClient, db_url: str
) -> None:
    partitioned = new_dataset(
        client,
        "clicks",
        partition={"unit": "day"},
        lifetime_budget={"epsilon": 4.0, "delta": 1e-5},
    )
    watcher = Watcher(db_url)
    try:
        before = watcher.take()
        for body, field in DATASET_NULLS:
            _refused(client, f"/v1/datasets/{partitioned['id']}", body, field)
        assert changed_tables(before, watcher.take()) == []
    finally:
        watcher.close()
    assert client.get(f"/v1/datasets/{partitioned['id']}").json() == partitioned


def _allocation(client: TestClient) -> str:
    """The URL of a new dataset's allocation team-a (epsilon 0.5, delta 1e-6)."""
    ds = new_dataset(client)["id"]
    made = client.post(
        f"/v1/datasets/{ds}/allocations",
        json={"name": "team-a", "budget": {"epsilon": 0.5, "delta": 1e-6}},
    )
    assert made.status_code == 201, made.text
    return f"/v1/datasets/{ds}/allocations/team-a"


def test_null_in_an_allocation_budget_is_422(client: TestClient, db_url: str) -> None:
    url = _allocation(client)
    watcher = Watcher(db_url)
    try:
        before = watcher.take()
        for body, field in ALLOCATION_NULLS:
            r = client.patch(url, json=body)
            assert r.status_code == 422, (body, r.text)
            assert r.json()["detail"].startswith(f"{field}: "), (body, r.text)
        assert changed_tables(before, watcher.take()) == []
    finally:
        watcher.close()
    r = client.patch(url, json={"budget": {"epsilon": 0.7}})
    assert r.status_code == 200, r.text
    assert r.json()["budget"] == {"epsilon": 0.7, "delta": 1e-6}


def _audited(client: TestClient, ds: str) -> list[str]:
    events = client.get("/v1/audit", params={"dataset": ds}).json()["events"]
    return [e["action"] for e in events]


@pytest.mark.parametrize(
    ("first", "null"),
    [
        ({"description": "2026 survey"}, {"description": None}),
        ({"allowed_mechanisms": ["gaussian"]}, {"allowed_mechanisms": None}),
    ],
)
def test_nullable_members_may_be_set_to_null(
    client: TestClient, first: dict[str, Any], null: dict[str, Any]
) -> None:
    ds = new_dataset(client)["id"]
    url = f"/v1/datasets/{ds}"
    r = client.patch(url, json=first)
    assert r.status_code == 200, r.text
    (member,) = null
    assert r.json()[member] == first[member]
    audited = len(_audited(client, ds))
    r = client.patch(url, json=null)
    assert r.status_code == 200, r.text
    assert r.json()[member] is None
    assert client.get(url).json()[member] is None
    assert len(_audited(client, ds)) == audited + 1


def test_members_left_out_keep_their_values(client: TestClient) -> None:
    ds = new_dataset(client, description="kept")
    url = f"/v1/datasets/{ds['id']}"
    r = client.patch(url, json={"budget": {"epsilon": 2.0}})
    assert r.status_code == 200, r.text
    after = r.json()
    assert after["budget"] == {"epsilon": 2.0, "delta": ds["budget"]["delta"]}
    assert after["description"] == "kept" and after["name"] == ds["name"]
    assert after["accounting"] == ds["accounting"] and after["adaptive"] == ds["adaptive"]
    assert client.patch(url, json={}).status_code == 200


def test_a_null_allocation_budget_is_not_told_to_leave_it_out(client: TestClient) -> None:
    """An allocation's PATCH changes only its budget, which is required: ``{"budget": null}``
    said "leave it out to keep its value", and leaving it out is a 422 as well (audit h2)."""
    url = _allocation(client)
    left_out = client.patch(url, json={})
    assert left_out.status_code == 422 and left_out.json()["detail"].startswith("budget: ")
    null = client.patch(url, json={"budget": None})
    assert null.status_code == 422, null.text
    detail = null.json()["detail"]
    assert detail.startswith("budget: ") and "leave it out" not in detail, detail
    assert "give epsilon, delta or both" in detail, detail
