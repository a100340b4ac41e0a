"""Allocations (issue 15): sub-budgets of a dataset, admitted together with the dataset's budget
in one transaction; refusals name the limit hit; keys limited to allocations."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.accounting.curve import PrivacyCurve
from app.accounting.filters import Budget, Filter, FilterKind
from app.accounting.mechanisms import mechanism_from_dict
from tests.conftest import new_dataset

LAPLACE = {"mechanism": "laplace", "epsilon": 0.3}


def _alloc(client: TestClient, ds: str, name: str, eps: float, delta: float = 1e-6) -> Any:
    r = client.post(
        f"/v1/datasets/{ds}/allocations",
        json={"name": name, "budget": {"epsilon": eps, "delta": delta}},
    )
    assert r.status_code == 201, r.text
    return r.json()


def _charge(client: TestClient, ds: str, **body: Any) -> Any:
    return client.post(f"/v1/datasets/{ds}/charges", json={"mechanism": LAPLACE, **body})


def _state(client: TestClient, ds: str) -> tuple[int, list[Any], list[Any]]:
    """What a refused or bad request must leave unchanged."""
    budget = client.get(f"/v1/datasets/{ds}/budget").json()
    allocations = client.get(f"/v1/datasets/{ds}/allocations").json()["allocations"]
    ledger = client.get(f"/v1/datasets/{ds}/ledger").json()["entries"]
    return budget["entries"], allocations, ledger


def test_create_list_get_patch_is_audited(client: TestClient) -> None:
    ds = new_dataset(client, budget={"epsilon": 2.0, "delta": 1e-6}, adaptive=False)["id"]
    a = _alloc(client, ds, "team-a", 0.5)
    assert {"id", "dataset_id", "name", "budget", "spent", "remaining", "exhausted"} <= set(a)
    assert a["dataset_id"] == ds and a["name"] == "team-a"
    assert a["budget"] == {"epsilon": 0.5, "delta": 1e-6}
    assert a["spent"]["epsilon"] == 0.0 and a["exhausted"] is False
    _alloc(client, ds, "team-b", 0.7)
    names = [x["name"] for x in client.get(f"/v1/datasets/{ds}/allocations").json()["allocations"]]
    assert names == ["team-a", "team-b"]
    assert client.get(f"/v1/datasets/{ds}/allocations/team-b").json()["budget"]["epsilon"] == 0.7
    assert client.get(f"/v1/datasets/{ds}/allocations/nobody").status_code == 404
    dup = client.post(
        f"/v1/datasets/{ds}/allocations",
        json={"name": "team-a", "budget": {"epsilon": 0.1, "delta": 1e-6}},
    )
    assert dup.status_code == 409
    r = client.patch(f"/v1/datasets/{ds}/allocations/team-a", json={"budget": {"epsilon": 0.9}})
    assert r.status_code == 200, r.text
    assert r.json()["budget"] == {"epsilon": 0.9, "delta": 1e-6}
    events = client.get("/v1/audit", params={"dataset": ds}).json()["events"]
    actions = [e["action"] for e in events]
    assert "allocation.created" in actions and "allocation.budget_raised" in actions
    raised = next(e for e in events if e["action"] == "allocation.budget_raised")
    assert raised["details"]["changes"]["budget"]["old"]["epsilon"] == 0.5
    assert (
        client.patch(
            f"/v1/datasets/{ds}/allocations/nobody", json={"budget": {"epsilon": 1.0}}
        ).status_code
        == 404
    )


@pytest.mark.parametrize("accounting,adaptive", [("rdp", False), ("zcdp", True), ("rdp", True)])
def test_allocation_limit_then_dataset_limit(
    client: TestClient, accounting: str, adaptive: bool
) -> None:
    """Overbooked allocations (0.7 + 0.7 > 1.0): each stops at its own budget; the dataset's
    budget stops them together; each refusal names its limit and changes nothing."""
    ds = new_dataset(
        client,
        budget={"epsilon": 1.0, "delta": 1e-6},
        accounting=accounting,
        adaptive=adaptive,
    )
    _alloc(client, ds["id"], "team-a", 0.7)
    _alloc(client, ds["id"], "team-b", 0.7)
    flt = Filter.create(
        FilterKind(ds["filter"]),
        Budget(0.7, 1e-6),
        None,
        ds["filter_params"]["orders"] if ds["filter_params"] else None,
    )
    # charge team-a until its own filter refuses: each admitted exactly while it fits
    total = PrivacyCurve.zero()
    small = {"mechanism": "laplace", "epsilon": 0.05}
    curve = mechanism_from_dict(small).curve()
    for _ in range(500):
        fits = flt.admits(total + curve)
        r = client.post(
            f"/v1/datasets/{ds['id']}/charges", json={"mechanism": small, "allocation": "team-a"}
        )
        if not fits:
            break
        assert r.status_code == 201, r.text
        assert r.json()["allocation"]["name"] == "team-a"
        total = total + curve
    assert r.status_code == 409, r.text
    problem = r.json()
    assert problem["limit"] == "allocation" and problem["limits"] == ["allocation"]
    assert problem["allocation"]["name"] == "team-a"
    before = _state(client, ds["id"])
    # team-b runs into the dataset's budget (team-a used most of it), not its own
    outcomes = []
    for _ in range(500):
        r = client.post(
            f"/v1/datasets/{ds['id']}/charges", json={"mechanism": small, "allocation": "team-b"}
        )
        outcomes.append(r.status_code)
        if r.status_code == 409:
            break
    assert outcomes[-1] == 409
    assert r.json()["limit"] == "dataset", r.json()
    b = client.get(f"/v1/datasets/{ds['id']}/allocations/team-b").json()
    assert b["exhausted"] is False  # its own budget was not the limit
    assert client.get(f"/v1/datasets/{ds['id']}/budget").json()["spent"]["epsilon"] <= 1.0
    a_after = client.get(f"/v1/datasets/{ds['id']}/allocations/team-a").json()
    assert a_after == next(x for x in before[1] if x["name"] == "team-a")
    rejections = client.get("/v1/rejections", params={"dataset": ds["id"]}).json()["rejections"]
    assert len(rejections) == 2
    metrics = client.get("/metrics").text
    for limit in ("allocation", "dataset"):
        line = (
            f'privacy_ledger_structure_refusals_total{{dataset="{ds["id"]}",limit="{limit}"}} 1.0'
        )
        assert line in metrics, limit
    assert client.post("/v1/admin/verify").json()["ok"] is True


def test_unknown_allocation_and_keys_outside_theirs_change_nothing(client: TestClient) -> None:
    ds = new_dataset(client, budget={"epsilon": 2.0, "delta": 1e-6})["id"]
    _alloc(client, ds, "team-a", 1.0)
    _alloc(client, ds, "team-b", 1.0)
    before = _state(client, ds)
    r = _charge(client, ds, allocation="team-z")
    assert r.status_code == 422 and "team-z" in r.json()["detail"]
    r = client.post(
        "/v1/keys", json={"role": "pipeline", "allocations": ["team-a", "no-such-team"]}
    )
    assert r.status_code == 422 and r.json()["unknown_allocations"] == ["no-such-team"]
    key = client.post("/v1/keys", json={"role": "pipeline", "allocations": ["team-a"]}).json()
    assert key["allocations"] == ["team-a"]
    headers = {"Authorization": f"Bearer {key['key']}"}
    for body in ({}, {"allocation": "team-b"}):
        r = client.post(
            f"/v1/datasets/{ds}/charges", json={"mechanism": LAPLACE, **body}, headers=headers
        )
        assert r.status_code == 403, r.text
        r = client.post(
            f"/v1/datasets/{ds}/reservations", json={"mechanism": LAPLACE, **body}, headers=headers
        )
        assert r.status_code == 403, r.text
    assert _state(client, ds) == before
    # nor calibrate what it could not charge: the 403 the charge gets, then its own allocation
    for params in ({}, {"allocation": "team-b"}):
        r = client.get(
            f"/v1/datasets/{ds}/calibrate",
            params={"mechanism": "laplace", **params},
            headers=headers,
        )
        assert r.status_code == 403 and "limited to" in r.json()["detail"], r.text
    r = client.get(
        f"/v1/datasets/{ds}/calibrate",
        params={"mechanism": "laplace", "allocation": "team-a"},
        headers=headers,
    )
    assert r.status_code == 200 and r.json()["value"] <= 1.0, r.text
    # the key cannot mint a wider key either
    r = client.post("/v1/keys", json={"role": "pipeline"}, headers=headers)
    assert r.status_code == 403
    r = client.post(
        f"/v1/datasets/{ds}/charges",
        json={"mechanism": LAPLACE, "allocation": "team-a"},
        headers=headers,
    )
    assert r.status_code == 201, r.text
    assert r.json()["entry"]["allocation_id"] == r.json()["allocation"]["id"]
    assert r.json()["entry"]["allocation_name"] == "team-a"  # the ledger's readers see the name
    # a hold of team-b cannot be committed or released by the team-a key
    hold = client.post(
        f"/v1/datasets/{ds}/reservations", json={"mechanism": LAPLACE, "allocation": "team-b"}
    ).json()
    assert client.post(f"/v1/reservations/{hold['id']}/commit", headers=headers).status_code == 403
    assert client.delete(f"/v1/reservations/{hold['id']}", headers=headers).status_code == 403


def test_an_admin_key_limited_to_allocations_changes_no_budget(client: TestClient) -> None:
    """A key limited to allocations charges them; as an admin it could raise its own
    allocation's budget, another's or the dataset's and so lift the limit it was given: every
    budget, rule, archive and allocation change is a 403 that changes nothing (it still charges
    its allocation, and mints keys limited to its allocations)."""
    ds = new_dataset(client, budget={"epsilon": 2.0, "delta": 1e-6})["id"]
    _alloc(client, ds, "team-a", 1.0)
    _alloc(client, ds, "team-b", 1.0)
    key = client.post("/v1/keys", json={"role": "admin", "allocations": ["team-a"]}).json()
    headers = {"Authorization": f"Bearer {key['key']}"}
    before = _state(client, ds)
    audit = client.get("/v1/audit").json()
    raised = {"budget": {"epsilon": 5.0, "delta": 1e-6}}
    refused = [
        client.patch(f"/v1/datasets/{ds}", json=raised, headers=headers),
        client.patch(f"/v1/datasets/{ds}", json={"adaptive": False}, headers=headers),
        client.patch(f"/v1/datasets/{ds}/allocations/team-a", json=raised, headers=headers),
        client.patch(f"/v1/datasets/{ds}/allocations/team-b", json=raised, headers=headers),
        client.post(
            f"/v1/datasets/{ds}/allocations",
            json={"name": "team-c", "budget": {"epsilon": 1.0, "delta": 1e-6}},
            headers=headers,
        ),
        client.post(f"/v1/datasets/{ds}/archive", headers=headers),
        client.post(
            "/v1/datasets",
            json={"name": "fresh", "budget": {"epsilon": 1.0, "delta": 1e-6}},
            headers=headers,
        ),
    ]
    for r in refused:
        assert r.status_code == 403, r.text
        assert "limited to allocations" in r.json()["detail"]
    assert _state(client, ds) == before
    assert client.get("/v1/audit").json() == audit
    r = client.post(
        f"/v1/datasets/{ds}/charges",
        json={"mechanism": LAPLACE, "allocation": "team-a"},
        headers=headers,
    )
    assert r.status_code == 201, r.text
    minted = client.post(
        "/v1/keys", json={"role": "pipeline", "allocations": ["team-a"]}, headers=headers
    )
    assert minted.status_code == 201, minted.text


def test_a_key_limited_to_allocations_revokes_only_keys_within_them(client: TestClient) -> None:
    """An allocation-limited admin revoked the last full admin key (200): afterwards no key
    could create datasets or change budgets. It may now list and revoke only keys limited to
    some of its allocations, and the last full admin key is never revoked while only scoped or
    limited admin keys remain."""
    ds = new_dataset(client)["id"]
    _alloc(client, ds, "team-a", 0.5)
    _alloc(client, ds, "team-b", 0.5)
    limited = client.post("/v1/keys", json={"role": "admin", "allocations": ["team-a"]}).json()
    headers = {"Authorization": f"Bearer {limited['key']}"}
    keys = client.get("/v1/keys").json()["keys"]
    full = [k for k in keys if k["allocations"] is None and k["datasets"] is None]
    assert len(full) == 1
    assert client.delete(f"/v1/keys/{full[0]['id']}", headers=headers).status_code == 404
    other = client.post("/v1/keys", json={"role": "pipeline", "allocations": ["team-b"]}).json()
    assert client.delete(f"/v1/keys/{other['id']}", headers=headers).status_code == 404
    mine = client.post(
        "/v1/keys", json={"role": "pipeline", "allocations": ["team-a"]}, headers=headers
    ).json()
    listed = {k["id"] for k in client.get("/v1/keys", headers=headers).json()["keys"]}
    assert listed == {limited["id"], mine["id"]}
    assert client.delete(f"/v1/keys/{mine['id']}", headers=headers).status_code == 200
    # the full admin key cannot revoke itself while only a limited admin key is left
    r = client.delete(f"/v1/keys/{full[0]['id']}")
    assert r.status_code == 403 and "last active unscoped admin" in r.json()["detail"]
    assert (
        client.post(
            "/v1/datasets", json={"name": "still", "budget": {"epsilon": 1.0, "delta": 1e-6}}
        ).status_code
        == 201
    )


def test_a_key_limited_to_allocations_reads_the_audit_of_the_keys_it_covers_only(
    client: TestClient,
) -> None:
    """An allocation-limited admin read the whole audit trail, key events included: the
    creation, role, scope and label of keys it can neither list nor revoke (h3 finding 6). It
    now sees the events of the datasets it can read (as everywhere else: every dataset for a
    key not scoped to datasets, their allocations' events included) and the key events of
    the keys it lists, nothing else; one also scoped to a dataset sees that dataset's."""
    ds = new_dataset(client)["id"]
    other_ds = new_dataset(client, "without-team-a")["id"]
    _alloc(client, ds, "team-a", 0.5)
    _alloc(client, ds, "team-b", 0.4)
    assert client.patch(f"/v1/datasets/{other_ds}", json={"description": "x"}).status_code == 200
    limited = client.post("/v1/keys", json={"role": "admin", "allocations": ["team-a"]}).json()
    in_ds = client.post(
        "/v1/keys", json={"role": "admin", "datasets": [ds], "allocations": ["team-a"]}
    ).json()
    hidden = [
        client.post("/v1/keys", json={"role": "admin", "label": "break-glass"}).json()["id"],
        client.post("/v1/keys", json={"role": "pipeline", "allocations": ["team-b"]}).json()["id"],
        client.post("/v1/keys", json={"role": "viewer", "datasets": [ds]}).json()["id"],
    ]
    headers = {"Authorization": f"Bearer {limited['key']}"}
    mine = client.post(
        "/v1/keys", json={"role": "pipeline", "allocations": ["team-a"]}, headers=headers
    ).json()
    assert client.delete(f"/v1/keys/{mine['id']}", headers=headers).status_code == 200
    everything = client.get("/v1/audit", params={"limit": 1000}).json()["events"]
    assert {e["target_id"] for e in everything} >= set(hidden)  # the full admin sees them

    def trail(key: dict[str, Any], **params: Any) -> list[dict[str, Any]]:
        h = {"Authorization": f"Bearer {key['key']}"}
        r = client.get("/v1/audit", params={"limit": 1000, **params}, headers=h)
        assert r.status_code == 200, r.text
        return list(r.json()["events"])

    def listed(key: dict[str, Any]) -> set[str]:
        h = {"Authorization": f"Bearer {key['key']}"}
        return {k["id"] for k in client.get("/v1/keys", headers=h).json()["keys"]}

    seen = trail(limited)
    key_events = [e for e in seen if e["dataset_id"] is None]
    covered = {limited["id"], in_ds["id"], mine["id"]}  # limited to team-a, any datasets
    assert {e["target_id"] for e in key_events} == listed(limited) == covered
    assert sorted(e["action"] for e in key_events) == ["key.created"] * 3 + ["key.revoked"]
    assert not {e["target_id"] for e in seen} & set(hidden)
    # dataset events: those of every dataset it reads (GET /v1/datasets/{id} answers 200)
    assert client.get(f"/v1/datasets/{other_ds}", headers=headers).status_code == 200
    of_datasets = [e["id"] for e in everything if e["dataset_id"] is not None]
    assert [e["id"] for e in seen if e["dataset_id"] is not None] == of_datasets
    assert {e["action"] for e in seen} >= {"dataset.created", "dataset.changed"}
    assert {e["details"].get("name") for e in seen if e["action"] == "allocation.created"} == {
        "team-a",
        "team-b",
    }
    assert [e["id"] for e in trail(limited, dataset=other_ds)] == [
        e["id"] for e in everything if e["dataset_id"] == other_ds
    ]
    # also scoped to the dataset: that dataset's events and the keys it covers (itself)
    seen = trail(in_ds)
    assert {e["dataset_id"] for e in seen} == {ds, None}
    assert {e["target_id"] for e in seen if e["dataset_id"] is None} == listed(in_ds)
    assert listed(in_ds) == {in_ds["id"]}
    assert trail(in_ds, dataset=other_ds) == []


def test_reservations_idempotency_and_dry_runs_with_allocations(client: TestClient) -> None:
    ds = new_dataset(client, budget={"epsilon": 5.0, "delta": 1e-6}, adaptive=False)["id"]
    _alloc(client, ds, "team-a", 0.65)
    body = {"mechanism": LAPLACE, "allocation": "team-a"}
    dry = client.post(f"/v1/datasets/{ds}/charges", params={"dry_run": "true"}, json=body)
    assert dry.status_code == 200 and dry.json()["allocation"]["spent"]["epsilon"] == 0.3
    assert client.get(f"/v1/datasets/{ds}/allocations/team-a").json()["entries"] == 0
    # a hold counts against the allocation: two 0.3 holds fill 0.65 beyond a third
    h1 = client.post(f"/v1/datasets/{ds}/reservations", json=body)
    h2 = client.post(f"/v1/datasets/{ds}/reservations", json=body)
    assert h1.status_code == h2.status_code == 201
    assert h1.json()["allocation_id"] is not None
    refused = client.post(f"/v1/datasets/{ds}/charges", json=body)
    assert refused.status_code == 409 and refused.json()["limit"] == "allocation"
    assert client.get(f"/v1/datasets/{ds}/allocations/team-a").json()["reserved"]["count"] == 2
    assert client.delete(f"/v1/reservations/{h2.json()['id']}").status_code == 200
    assert client.post(f"/v1/reservations/{h1.json()['id']}/commit").status_code == 200
    a = client.get(f"/v1/datasets/{ds}/allocations/team-a").json()
    assert a["entries"] == 1 and a["reserved"] is None and a["spent"]["epsilon"] == 0.3
    # idempotency: the same key charges once; another allocation under the same key is a 422
    headers = {"Idempotency-Key": "k-1"}
    first = client.post(f"/v1/datasets/{ds}/charges", json=body, headers=headers)
    again = client.post(f"/v1/datasets/{ds}/charges", json=body, headers=headers)
    assert first.status_code == again.status_code == 201
    assert first.json() == again.json()
    assert client.get(f"/v1/datasets/{ds}/allocations/team-a").json()["entries"] == 2
    other = client.post(f"/v1/datasets/{ds}/charges", json={"mechanism": LAPLACE}, headers=headers)
    assert other.status_code == 422


def test_pld_datasets_have_no_allocations(client: TestClient) -> None:
    ds = new_dataset(client, accounting="pld", adaptive=False)["id"]
    r = client.post(
        f"/v1/datasets/{ds}/allocations",
        json={"name": "team-a", "budget": {"epsilon": 0.5, "delta": 1e-6}},
    )
    assert r.status_code == 422 and "pld" in r.json()["detail"]
    assert client.get(f"/v1/datasets/{ds}/allocations").json()["allocations"] == []


def test_a_small_allocation_on_an_adaptive_dataset_admits_gaussians(client: TestClient) -> None:
    """An allocation's fixed-order filter is chosen for its own budget. At the dataset's order
    (20 for epsilon 1, delta 1e-6) a budget of 0.3 has a negative threshold, 0.3 - log(1e6) / 19,
    so such an allocation refused every Gaussian charge, however much noise it had."""
    ds = new_dataset(client, budget={"epsilon": 1.0, "delta": 1e-6})["id"]  # adaptive default
    _alloc(client, ds, "small", 0.3)
    gaussian = {"mechanism": "gaussian", "sigma": 40.0}
    r = client.post(
        f"/v1/datasets/{ds}/charges", json={"mechanism": gaussian, "allocation": "small"}
    )
    assert r.status_code == 201, r.text
    # its budget change keeps the order it was created with, and still admits
    assert (
        client.patch(
            f"/v1/datasets/{ds}/allocations/small", json={"budget": {"epsilon": 0.35}}
        ).status_code
        == 200
    )
    r = client.post(
        f"/v1/datasets/{ds}/charges", json={"mechanism": gaussian, "allocation": "small"}
    )
    assert r.status_code == 201, r.text
