"""End-to-end contract smoke test through TestClient on both databases."""

from __future__ import annotations

from fastapi.testclient import TestClient

from tests.conftest import new_dataset


def test_charge_until_refused_and_budget(client: TestClient) -> None:
    ds = new_dataset(client, accounting="rdp", adaptive=False)
    url = f"/v1/datasets/{ds['id']}/charges"
    answers = [
        client.post(url, json={"mechanism": {"mechanism": "laplace", "epsilon": 0.25}})
        for _ in range(5)
    ]
    # the pure-DP sum reaches exactly 1.0 after four charges; the fifth would exceed it
    assert [r.status_code for r in answers] == [201, 201, 201, 201, 409]
    refusal = answers[-1].json()
    assert answers[-1].headers["content-type"] == "application/problem+json"
    assert refusal["would_spend"]["epsilon"] > 1.0
    assert {"spent", "budget", "requested"} <= refusal.keys()
    b = client.get(f"/v1/datasets/{ds['id']}/budget").json()
    assert b["entries"] == 4
    assert b["spent"]["epsilon"] <= 1.0
    rej = client.get("/v1/rejections", params={"dataset": ds["id"]}).json()["rejections"]
    assert len(rej) == 1 and rej[0]["operation"] == "charge"
