"""A totals row whose entry count lags its ledger (a hand edit) made every charge of the dataset
answer 500 (the new entry's position clashed) until ``verify --rebuild`` (stop 32 operations
audit). The charge now answers 503 ``totals-drifted`` naming the command, records nothing, and
works again after the rebuild."""

from __future__ import annotations

from fastapi.testclient import TestClient

from tests.conftest import new_dataset, run_sql

CHARGE = {"mechanism": {"mechanism": "laplace", "epsilon": 0.01}}


def test_a_lagging_entry_count_answers_503_naming_the_rebuild(
    client: TestClient, db_url: str
) -> None:
    ds = new_dataset(client, budget={"epsilon": 5.0, "delta": 1e-6})
    url = f"/v1/datasets/{ds['id']}/charges"
    for _ in range(3):
        assert client.post(url, json=CHARGE).status_code == 201
    run_sql(
        db_url,
        "UPDATE dataset_total SET entry_count = entry_count - 1 WHERE dataset_id = :d",
        d=ds["id"],
    )
    r = client.post(url, json=CHARGE)
    assert r.status_code == 503, r.text
    assert r.json()["type"].endswith("/totals-drifted")
    assert "verify --rebuild" in r.json()["detail"]
    assert run_sql(
        db_url, "SELECT count(*) FROM ledger_entry WHERE dataset_id = :d", d=ds["id"]
    ) == [(3,)]
    report = client.post("/v1/admin/verify", params={"rebuild": "true"}).json()
    assert "entry_count" in report["datasets"][0]["drift"], report
    assert client.post(url, json=CHARGE).status_code == 201
    assert client.get(f"/v1/datasets/{ds['id']}/budget").json()["entries"] == 4
