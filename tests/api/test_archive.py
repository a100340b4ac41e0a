"""Issue 16 item 8: archive a dataset (admin, audited, reversible).

An archived dataset refuses charges and reservations with a 409 naming the archive and records
nothing; its ledger, budget and rejections stay readable; a reservation it already held may
still be committed; the default listing hides it and ``?archived=`` shows it.
"""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from tests.conftest import new_dataset

LAPLACE = {"mechanism": {"mechanism": "laplace", "epsilon": 0.1}}


def _names(client: TestClient, **params: Any) -> list[str]:
    r = client.get("/v1/datasets", params=params)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["total"] == len(body["datasets"])
    return [d["name"] for d in body["datasets"]]


def test_archive_refuses_new_spend_and_keeps_history_readable(client: TestClient) -> None:
    ds = new_dataset(client, "finished")
    other = new_dataset(client, "ongoing")
    url = f"/v1/datasets/{ds['id']}"
    assert ds["archived"] is False and ds["archived_at"] is None
    assert client.post(f"{url}/charges", json=LAPLACE).status_code == 201
    hold = client.post(f"{url}/reservations", json={**LAPLACE, "ttl_seconds": 600})
    assert hold.status_code == 201
    before = client.get(f"{url}/budget").json()

    r = client.post(f"{url}/archive")
    assert r.status_code == 200, r.text
    archived = r.json()
    assert archived["archived"] is True and archived["archived_at"] is not None
    # idempotent: archiving again answers the same dataset, and audits nothing more
    again = client.post(f"{url}/archive")
    assert again.status_code == 200 and again.json()["archived_at"] == archived["archived_at"]

    for path, body in (
        ("charges", LAPLACE),
        ("charges?dry_run=true", LAPLACE),
        ("reservations", {**LAPLACE, "ttl_seconds": 60}),
    ):
        refused = client.post(f"{url}/{path}", json=body)
        assert refused.status_code == 409, (path, refused.text)
        problem = refused.json()
        assert problem["type"].endswith("/dataset-archived")
        assert "archived" in problem["detail"] and "finished" in problem["detail"]
    # nothing fits an archived dataset: calibrate says so as a charge does (h1 finding 5:
    # it answered 200 with a sigma "that still fits")
    refused = client.get(f"{url}/calibrate", params={"mechanism": "gaussian"})
    assert refused.status_code == 409, refused.text
    assert refused.json()["type"].endswith("/dataset-archived")
    assert refused.json()["archived_at"] == archived["archived_at"]
    # nothing recorded: no entry, no rejection, the spend unchanged
    after = client.get(f"{url}/budget").json()
    assert after["entries"] == before["entries"] == 1
    assert after["spent"] == before["spent"]
    assert client.get(f"{url}/rejections").json()["rejections"] == []
    assert len(client.get(f"{url}/ledger").json()["entries"]) == 1
    # a hold taken before the archive may still be committed
    committed = client.post(f"/v1/reservations/{hold.json()['id']}/commit")
    assert committed.status_code == 200 and committed.json()["status"] == "committed"
    assert client.get(f"{url}/budget").json()["entries"] == 2
    # the other dataset is untouched
    assert client.post(f"/v1/datasets/{other['id']}/charges", json=LAPLACE).status_code == 201

    # listing: hidden by default, shown by the filters; a direct read still works
    assert _names(client) == ["ongoing"]
    assert _names(client, archived="true") == ["finished"]
    assert _names(client, archived="all") == ["finished", "ongoing"]
    assert _names(client, include_archived="true") == ["finished", "ongoing"]
    assert client.get("/v1/datasets", params={"archived": "maybe"}).status_code == 422
    assert client.get(url).json()["archived"] is True

    r = client.post(f"{url}/unarchive")
    assert r.status_code == 200 and r.json()["archived"] is False
    assert r.json()["archived_at"] is None
    assert client.post(f"{url}/unarchive").status_code == 200
    assert client.post(f"{url}/charges", json=LAPLACE).status_code == 201
    assert client.get(f"{url}/calibrate", params={"mechanism": "gaussian"}).status_code == 200
    assert _names(client) == ["finished", "ongoing"]

    actions = [
        e["action"]
        for e in client.get("/v1/audit", params={"dataset": ds["id"]}).json()["events"]
        if e["action"].startswith("dataset.")
    ]
    assert sorted(actions) == ["dataset.archived", "dataset.created", "dataset.unarchived"]


def test_archive_is_admin_only_and_scope_checked(client: TestClient) -> None:
    a = new_dataset(client, "alpha")
    b = new_dataset(client, "beta")
    scoped = client.post("/v1/keys", json={"role": "admin", "datasets": [a["id"]]}).json()
    viewer = client.post("/v1/keys", json={"role": "viewer"}).json()
    me = {"Authorization": f"Bearer {scoped['key']}"}
    them = {"Authorization": f"Bearer {viewer['key']}"}
    assert client.post(f"/v1/datasets/{a['id']}/archive", headers=them).status_code == 403
    assert client.post(f"/v1/datasets/{b['id']}/archive", headers=me).status_code == 404
    assert client.post(f"/v1/datasets/{a['id']}/archive", headers=me).status_code == 200
    assert client.post("/v1/datasets/nope/archive").status_code == 404
    assert client.get(f"/v1/datasets/{b['id']}").json()["archived"] is False
