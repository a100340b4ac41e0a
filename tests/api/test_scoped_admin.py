"""Issue 10, item 3: an admin key scoped to dataset A stays inside A.

It mints keys only within its scope and role (never an unscoped key), cannot create datasets,
sees only A's part of every admin listing (keys, audit, rejections, verify, datasets), and
keys or datasets outside its scope are not found (404), as for a missing one.
"""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.conftest import ADMIN, new_dataset

LAPLACE = {"mechanism": {"mechanism": "laplace", "epsilon": 0.1}}
HUGE = {"mechanism": {"mechanism": "laplace", "epsilon": 100.0}}


def _bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


class World:
    def __init__(self, client: TestClient) -> None:
        self.c = client
        self.a = new_dataset(client, "alpha")
        self.b = new_dataset(client, "beta")
        self.scoped_admin = self.mint({"role": "admin", "datasets": [self.a["id"]]})
        self.me = _bearer(self.scoped_admin["key"])
        self.unscoped_viewer = self.mint({"role": "viewer"})
        self.b_pipeline = self.mint({"role": "pipeline", "datasets": [self.b["id"]]})
        self.ab_viewer = self.mint({"role": "viewer", "datasets": [self.a["id"], self.b["id"]]})
        # activity on both datasets: charges, refusals, a budget change
        for ds in (self.a, self.b):
            assert client.post(f"/v1/datasets/{ds['id']}/charges", json=LAPLACE).status_code == 201
            assert client.post(f"/v1/datasets/{ds['id']}/charges", json=HUGE).status_code == 409
        assert (
            client.patch(f"/v1/datasets/{self.b['id']}", json={"description": "b"}).status_code
            == 200
        )

    def mint(self, body: dict[str, Any], headers: dict[str, str] = ADMIN) -> dict[str, Any]:
        r = self.c.post("/v1/keys", json=body, headers=headers)
        assert r.status_code == 201, r.text
        return dict(r.json())

    def key_ids(self, headers: dict[str, str] = ADMIN) -> set[str]:
        return {k["id"] for k in self.c.get("/v1/keys", headers=headers).json()["keys"]}


@pytest.fixture
def w(client: TestClient) -> World:
    return World(client)


@pytest.mark.parametrize(
    "body",
    [
        {"role": "admin"},
        {"role": "admin", "datasets": None},
        {"role": "viewer"},
    ],
)
def test_cannot_mint_an_unscoped_key(w: World, body: dict) -> None:
    before = w.key_ids()
    r = w.c.post("/v1/keys", json=body, headers=w.me)
    assert r.status_code == 403 and "scoped" in r.json()["detail"]
    assert w.key_ids() == before


@pytest.mark.parametrize("which", ["b", "a_and_b", "missing"])
def test_cannot_mint_a_key_beyond_its_datasets(w: World, which: str) -> None:
    datasets = {
        "b": [w.b["id"]],
        "a_and_b": [w.a["id"], w.b["id"]],
        "missing": ["ds_0000000000000000"],
    }[which]
    before = w.key_ids()
    r = w.c.post("/v1/keys", json={"role": "admin", "datasets": datasets}, headers=w.me)
    assert r.status_code == 422  # a dataset it cannot see is unknown to it, like a missing one
    assert r.json()["unknown"] == [d for d in datasets if d != w.a["id"]]
    assert w.key_ids() == before


@pytest.mark.parametrize("as_scoped", [False, True])
def test_an_empty_datasets_list_is_refused_not_a_key_that_reaches_nothing(
    w: World, as_scoped: bool
) -> None:
    """``"datasets": []`` made a key that reached no dataset (201, a useless secret shown once),
    which every scoped admin then covered; it is a 422 as ``"allocations": []`` is, with the
    reason. Null or absent keeps meaning every dataset."""
    headers = w.me if as_scoped else ADMIN
    before = w.key_ids()
    for body in (
        {"role": "pipeline", "datasets": []},
        {"role": "pipeline", "datasets": [], "allocations": ["team"]},
    ):
        r = w.c.post("/v1/keys", json=body, headers=headers)
        assert r.status_code == 422, r.text
        problem = r.json()
        assert "datasets" in problem["detail"] and "reaches no dataset" in problem["detail"]
        assert [e["loc"] for e in problem["errors"]] == [["datasets"]]
    assert w.key_ids() == before
    if not as_scoped:
        for body in ({"role": "viewer", "datasets": None}, {"role": "viewer"}):
            assert w.mint(body)["datasets"] is None


def test_keys_name_datasets_by_id_or_name(w: World) -> None:
    """``datasets`` takes ids or names, as every dataset route does (names were 'unknown
    dataset ids'); the key stores ids. A name the scoped admin cannot see is unknown to it."""
    minted = w.mint({"role": "viewer", "datasets": [w.a["name"]]}, headers=w.me)
    assert minted["datasets"] == [w.a["id"]]
    r = w.c.post("/v1/keys", json={"role": "viewer", "datasets": [w.b["name"]]}, headers=w.me)
    assert r.status_code == 422 and r.json()["unknown"] == [w.b["name"]]


def test_a_key_for_a_dataset_name_with_allocations_checks_the_dataset_first(w: World) -> None:
    """An unknown dataset is named as such, not reported as an unknown allocation."""
    r = w.c.post(
        "/v1/keys",
        json={"role": "pipeline", "datasets": ["no-such-dataset"], "allocations": ["team"]},
    )
    assert r.status_code == 422 and r.json()["unknown"] == ["no-such-dataset"]


def test_mints_within_scope_and_the_minted_admin_stays_inside(w: World) -> None:
    minted = w.mint({"role": "admin", "datasets": [w.a["id"]]}, headers=w.me)
    assert minted["datasets"] == [w.a["id"]]
    h = _bearer(minted["key"])
    assert (
        w.c.patch(f"/v1/datasets/{w.a['id']}", json={"description": "ok"}, headers=h).status_code
        == 200
    )
    assert (
        w.c.patch(f"/v1/datasets/{w.b['id']}", json={"description": "x"}, headers=h).status_code
        == 404
    )
    assert (
        w.c.patch(f"/v1/datasets/{w.b['id']}", json={"description": "x"}, headers=w.me).status_code
        == 404
    )
    assert w.c.get(f"/v1/datasets/{w.b['id']}").json()["description"] == "b"
    viewer = w.mint({"role": "viewer", "datasets": [w.a["id"]]}, headers=w.me)
    assert w.c.get(f"/v1/datasets/{w.a['id']}", headers=_bearer(viewer["key"])).status_code == 200


def test_cannot_create_datasets(w: World) -> None:
    r = w.c.post(
        "/v1/datasets",
        json={"name": "gamma", "budget": {"epsilon": 1, "delta": 1e-6}},
        headers=w.me,
    )
    assert r.status_code == 403
    assert [d["name"] for d in w.c.get("/v1/datasets").json()["datasets"]] == ["alpha", "beta"]


def test_key_listing_shows_only_keys_within_scope(w: World) -> None:
    minted = w.mint({"role": "viewer", "datasets": [w.a["id"]]}, headers=w.me)
    assert w.key_ids(w.me) == {w.scoped_admin["id"], minted["id"]}
    assert {w.unscoped_viewer["id"], w.b_pipeline["id"], w.ab_viewer["id"]} <= w.key_ids()


@pytest.mark.parametrize("victim", ["unscoped_viewer", "b_pipeline", "ab_viewer", "root"])
def test_keys_outside_scope_cannot_be_revoked(w: World, victim: str) -> None:
    if victim == "root":
        key_id = next(
            k["id"]
            for k in w.c.get("/v1/keys").json()["keys"]
            if k["label"] and "bootstrap" in k["label"]
        )
    else:
        key_id = getattr(w, victim)["id"]
    r = w.c.delete(f"/v1/keys/{key_id}", headers=w.me)
    assert r.status_code == 404
    listed = {k["id"]: k for k in w.c.get("/v1/keys").json()["keys"]}
    assert listed[key_id]["revoked"] is False


def test_keys_within_scope_can_be_revoked(w: World) -> None:
    minted = w.mint({"role": "pipeline", "datasets": [w.a["id"]]}, headers=w.me)
    assert w.c.delete(f"/v1/keys/{minted['id']}", headers=w.me).json()["revoked"] is True
    assert w.c.get("/v1/datasets", headers=_bearer(minted["key"])).status_code == 401


def test_last_unscoped_admin_cannot_be_revoked_while_scoped_admins_exist(w: World) -> None:
    root = next(
        k
        for k in w.c.get("/v1/keys").json()["keys"]
        if k["role"] == "admin" and k["datasets"] is None
    )
    r = w.c.delete(f"/v1/keys/{root['id']}")
    assert r.status_code == 403 and "unscoped" in r.json()["detail"]


def test_audit_shows_only_its_datasets_and_keys(w: World) -> None:
    minted = w.mint({"role": "viewer", "datasets": [w.a["id"]]}, headers=w.me)
    events = w.c.get("/v1/audit", headers=w.me).json()["events"]
    assert events
    for e in events:
        assert e["dataset_id"] == w.a["id"] or e["target_id"] in {
            w.scoped_admin["id"],
            minted["id"],
        }, e
    assert {e["target_id"] for e in events if e["action"] == "key.created"} == {
        w.scoped_admin["id"],
        minted["id"],
    }
    assert w.c.get("/v1/audit", params={"dataset": w.b["id"]}, headers=w.me).json()["events"] == []
    everything = w.c.get("/v1/audit").json()["events"]
    assert any(e["dataset_id"] == w.b["id"] for e in everything)  # they exist, for the root key


def test_rejections_verify_and_datasets_are_filtered(w: World) -> None:
    rejections = w.c.get("/v1/rejections", headers=w.me).json()["rejections"]
    assert [r["dataset_id"] for r in rejections] == [w.a["id"]]
    assert w.c.get("/v1/rejections", params={"dataset": w.b["id"]}, headers=w.me).status_code == 404
    report = w.c.post("/v1/admin/verify", params={"rebuild": True}, headers=w.me).json()
    assert [d["dataset_id"] for d in report["datasets"]] == [w.a["id"]]
    assert [d["id"] for d in w.c.get("/v1/datasets", headers=w.me).json()["datasets"]] == [
        w.a["id"]
    ]
    assert len(w.c.post("/v1/admin/verify").json()["datasets"]) == 2
