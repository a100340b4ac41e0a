"""verify compares the ``held_count`` columns (a dataset's totals, an allocation's) with the
active holds. ``/metrics`` (``privacy_ledger_dataset_active_holds``) and the search for a
partitioned dataset's most-spent blocks read these columns, not the held sums beside them; a
hand-edited count passed verify, survived ``--rebuild``, and the gauge read 0 beside two active
holds (stop 32 operations audit)."""

from __future__ import annotations

from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import new_dataset, run_sql


def _gauge(client: TestClient, dataset_id: str) -> float:
    for family in text_string_to_metric_families(client.get("/metrics").text):
        for sample in family.samples:
            if (
                sample.name == "privacy_ledger_dataset_active_holds"
                and sample.labels.get("dataset_id") == dataset_id
            ):
                return float(sample.value)
    raise AssertionError("no active-holds gauge for the dataset")


def test_a_drifted_held_count_is_found_and_rebuilt(client: TestClient, db_url: str) -> None:
    ds = new_dataset(client, budget={"epsilon": 5.0, "delta": 1e-6})
    r = client.post(
        f"/v1/datasets/{ds['id']}/allocations",
        json={"name": "team-a", "budget": {"epsilon": 4.0, "delta": 1e-6}},
    )
    assert r.status_code == 201, r.text
    hold = {
        "mechanism": {"mechanism": "gaussian", "sigma": 5.0},
        "ttl_seconds": 600,
        "allocation": "team-a",
    }
    for _ in range(2):
        assert client.post(f"/v1/datasets/{ds['id']}/reservations", json=hold).status_code == 201
    assert client.post("/v1/admin/verify").json()["ok"]
    assert _gauge(client, ds["id"]) == 2.0

    run_sql(db_url, "UPDATE dataset_total SET held_count = 0 WHERE dataset_id = :d", d=ds["id"])
    run_sql(db_url, "UPDATE allocation SET held_count = 5 WHERE dataset_id = :d", d=ds["id"])
    assert _gauge(client, ds["id"]) == 0.0  # what the metrics read
    report = client.post("/v1/admin/verify").json()
    assert not report["ok"], report
    assert report["datasets"][0]["drift"] == ["held_count", "allocation:team-a"], report

    rebuilt = client.post("/v1/admin/verify", params={"rebuild": "true"}).json()
    assert rebuilt["datasets"][0].get("rebuilt") is True, rebuilt
    assert client.post("/v1/admin/verify").json()["ok"]
    assert _gauge(client, ds["id"]) == 2.0
    ((count,),) = run_sql(
        db_url, "SELECT held_count FROM allocation WHERE dataset_id = :d", d=ds["id"]
    )
    assert count == 2
