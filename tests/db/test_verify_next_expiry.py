"""verify compares the totals row's earliest hold expiry with the active holds'. Expiry fails
closed only through it: a locked write settles due holds only when ``held_next_expiry`` says one
is due (the sweeper too, as it settles by locking). Drifted to null beside an active hold, the
hold never expired: past its time it was still released (its budget freed, never charged),
and verify said ok."""

from __future__ import annotations

from fastapi.testclient import TestClient

from tests.conftest import expire_active_holds, new_dataset, run_sql


def _next_expiry(db_url: str, dataset_id: str, null: bool = False) -> tuple[object, object]:
    """The stored earliest expiry (after setting it to null, if asked), and the active holds'."""
    if null:
        run_sql(
            db_url,
            "UPDATE dataset_total SET held_next_expiry = NULL WHERE dataset_id = :d",
            d=dataset_id,
        )
    ((stored, active),) = run_sql(
        db_url,
        "SELECT t.held_next_expiry, (SELECT min(expires_at) FROM reservation r "
        "WHERE r.dataset_id = t.dataset_id AND r.status = 'active') "
        "FROM dataset_total t WHERE t.dataset_id = :d",
        d=dataset_id,
    )
    return stored, active


def test_a_lost_earliest_expiry_is_drift_and_rebuilt(client: TestClient, db_url: str) -> None:
    ds = new_dataset(client, budget={"epsilon": 5.0, "delta": 1e-6})
    hold = {"mechanism": {"mechanism": "gaussian", "sigma": 5.0}, "ttl_seconds": 600}
    for _ in range(2):
        r = client.post(f"/v1/datasets/{ds['id']}/reservations", json=hold)
        assert r.status_code == 201, r.text
    rid = r.json()["id"]
    stored, active = _next_expiry(db_url, ds["id"])
    assert stored is not None and str(stored) == str(active)
    assert client.post("/v1/admin/verify").json()["ok"]

    stored, active = _next_expiry(db_url, ds["id"], null=True)
    assert stored is None and active is not None
    report = client.post("/v1/admin/verify").json()
    assert not report["ok"] and report["datasets"][0]["drift"] == ["held_next_expiry"], report
    rebuilt = client.post("/v1/admin/verify", params={"rebuild": "true"}).json()
    assert rebuilt["datasets"][0].get("rebuilt") is True, rebuilt
    assert client.post("/v1/admin/verify").json()["ok"]
    stored, active = _next_expiry(db_url, ds["id"])
    assert stored is not None and str(stored) == str(active)

    # rebuilt, expiry fails closed again: past its time the hold is charged, not released
    expire_active_holds(db_url)
    r = client.delete(f"/v1/reservations/{rid}")
    assert r.status_code == 409, r.text
    assert client.get(f"/v1/reservations/{rid}").json()["status"] == "expired"
    assert client.get(f"/v1/datasets/{ds['id']}/budget").json()["entries"] == 2
