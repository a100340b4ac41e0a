"""A dataset's rules (accounting, adaptive, allowed kinds) may change before its first charge;
its allocations and its lifetime budget then take filters of the new kind, exactly those they
would have had if created after the change. Kept as they were, a random search found 500s (a
fixed-order filter without its orders) and an allocation labelled zcdp_filter that admitted by
the old fixed-order RDP rule."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.conftest import new_dataset

TRANSITIONS: list[tuple[dict[str, Any], dict[str, Any]]] = [
    ({"accounting": "rdp", "adaptive": False}, {"adaptive": True}),
    ({}, {"adaptive": False}),
    ({}, {"accounting": "zcdp"}),
    ({}, {"accounting": "zcdp", "adaptive": False}),
    ({"accounting": "zcdp"}, {"accounting": "rdp"}),
    ({}, {"allowed_mechanisms": ["gaussian"]}),
    ({"allowed_mechanisms": ["gaussian"]}, {"allowed_mechanisms": None}),
]
BUDGET = {"epsilon": 0.5, "delta": 1e-6}
VIEW = ("spent", "remaining", "exhausted")
GAUSS = {"mechanism": "gaussian", "sigma": 20.0}


@pytest.mark.parametrize(("before", "change"), TRANSITIONS)
def test_allocations_take_the_new_rules(
    client: TestClient, before: dict[str, Any], change: dict[str, Any]
) -> None:
    ds = new_dataset(client, **before)
    u = f"/v1/datasets/{ds['id']}"
    assert (
        client.post(f"{u}/allocations", json={"name": "early", "budget": BUDGET}).status_code == 201
    )
    r = client.patch(u, json=change)
    assert r.status_code == 200, r.text
    assert (
        client.post(f"{u}/allocations", json={"name": "late", "budget": BUDGET}).status_code == 201
    )
    listed = client.get(f"{u}/allocations")
    assert listed.status_code == 200, listed.text
    early = client.get(f"{u}/allocations/early").json()
    late = client.get(f"{u}/allocations/late").json()
    assert early["spent"]["filter"] == r.json()["filter"]
    assert {k: early[k] for k in VIEW} == {k: late[k] for k in VIEW}
    answers = []
    for name in ("early", "late"):
        a = client.post(
            f"{u}/charges",
            params={"dry_run": "true"},
            json={"mechanism": GAUSS, "allocation": name},
        )
        assert a.status_code == 200, a.text
        answers.append({k: a.json()["allocation"][k] for k in VIEW})
    assert answers[0] == answers[1]


@pytest.mark.parametrize(("before", "change"), TRANSITIONS[:5])
def test_the_lifetime_budget_takes_the_new_rules(
    client: TestClient, before: dict[str, Any], change: dict[str, Any]
) -> None:
    structure = {"partition": {"unit": "day"}, "lifetime_budget": {"epsilon": 3.0, "delta": 1e-6}}
    ds = new_dataset(client, name="changed", **before, **structure)
    u = f"/v1/datasets/{ds['id']}"
    r = client.patch(u, json=change)
    assert r.status_code == 200, r.text
    fresh = new_dataset(client, name="fresh", **{**before, **change}, **structure)
    assert r.json()["filter"] == fresh["filter"]
    budgets = [client.get(f"/v1/datasets/{d}/budget") for d in (ds["id"], fresh["id"])]
    assert budgets[0].status_code == 200, budgets[0].text
    assert budgets[0].json()["lifetime"] == budgets[1].json()["lifetime"]
    charge = {"mechanism": GAUSS, "blocks": {"from": "2026-11-01", "to": "2026-11-01"}}
    spent = [
        client.post(f"/v1/datasets/{d}/charges", json=charge).json()["spent"]
        for d in (ds["id"], fresh["id"])
    ]
    assert spent[0] == spent[1]


def test_pld_accounting_refuses_structures_it_does_not_keep(client: TestClient) -> None:
    ds = new_dataset(client, accounting="rdp", adaptive=False)
    u = f"/v1/datasets/{ds['id']}"
    client.post(f"{u}/allocations", json={"name": "team", "budget": BUDGET})
    r = client.patch(u, json={"accounting": "pld"})
    assert r.status_code == 422 and "allocations" in r.json()["detail"]
    assert client.get(u).json()["accounting"] == "rdp"
    part = new_dataset(client, name="days", adaptive=False, partition={"unit": "day"})
    r = client.patch(f"/v1/datasets/{part['id']}", json={"accounting": "pld"})
    assert r.status_code == 422 and "time blocks" in r.json()["detail"]


def test_rules_are_fixed_by_the_first_charge_or_reservation_and_the_409_says_which(
    client: TestClient,
) -> None:
    """A dataset with only a reservation refused a rule change, rightly, but said "after the
    first charge" (an outside audit)."""
    held = f"/v1/datasets/{new_dataset(client, 'held')['id']}"
    assert client.post(f"{held}/reservations", json={"mechanism": GAUSS}).status_code == 201
    r = client.patch(held, json={"adaptive": False})
    assert r.status_code == 409, r.text
    assert r.json()["detail"].startswith("cannot change adaptive after the first reservation")
    charged = f"/v1/datasets/{new_dataset(client, 'charged')['id']}"
    assert client.post(f"{charged}/charges", json={"mechanism": GAUSS}).status_code == 201
    r = client.patch(charged, json={"accounting": "zcdp", "adaptive": False})
    assert r.status_code == 409, r.text
    assert r.json()["detail"].startswith(
        "cannot change accounting, adaptive after the first charge"
    )
