"""verify compares the stored sum of the entries' own deltas with the ledger's: admission
converts at the budget delta less that sum, so a stored sum drifted low admits charges the
ledger does not have room for. verify compared rho, RDP, pure epsilon, the Gaussian flag and the
count, not the delta: with it drifted to 0 the report was 'ok' (and --rebuild left it), and a
Gaussian the ledger refuses was admitted."""

from __future__ import annotations

from fastapi.testclient import TestClient

from tests.conftest import new_dataset, run_sql

OWN_DELTA = {"mechanism": "approx_dp", "epsilon": 0.05, "delta": 9e-6}
GAUSSIAN = {"mechanism": "gaussian", "sigma": 4.5}
"""Fits a budget of (1, 1e-5) at delta 1e-5 but not at the 1e-6 the entry above leaves."""


def _delta_sum(db_url: str, table: str, dataset_id: str, drifted: float | None = None) -> float:
    """The stored sum of entry deltas in ``table``'s row of the dataset (``dataset_total``, or
    ``allocation`` for its one allocation), after writing ``drifted`` in its place if given."""
    if drifted is not None:
        run_sql(
            db_url, f"UPDATE {table} SET delta = :v WHERE dataset_id = :d", v=drifted, d=dataset_id
        )
    ((value,),) = run_sql(db_url, f"SELECT delta FROM {table} WHERE dataset_id = :d", d=dataset_id)
    return float(value)


def _ledger_delta(db_url: str, dataset_id: str) -> float:
    """The recount: the one entry's own delta as the ledger stores it."""
    ((delta,),) = run_sql(
        db_url, "SELECT delta FROM ledger_entry WHERE dataset_id = :d", d=dataset_id
    )
    return float(delta)


def _drifted_to_zero_then_rebuilt(
    client: TestClient, db_url: str, table: str, dataset_id: str, dry: dict, drift: str
) -> None:
    """With the stored sum drifted to 0 the Gaussian the ledger has no room for is admitted
    (what the drift does) and verify names ``drift``; --rebuild restores the sum and the
    Gaussian is refused again."""
    charges = f"/v1/datasets/{dataset_id}/charges"
    _delta_sum(db_url, table, dataset_id, drifted=0.0)
    assert client.post(charges, params={"dry_run": "true"}, json=dry).status_code == 200
    report = client.post("/v1/admin/verify").json()
    assert not report["ok"] and report["datasets"][0]["drift"] == [drift], report

    rebuilt = client.post("/v1/admin/verify", params={"rebuild": "true"}).json()
    assert rebuilt["datasets"][0].get("rebuilt") is True, rebuilt
    assert client.post("/v1/admin/verify").json()["ok"]
    assert client.post(charges, params={"dry_run": "true"}, json=dry).status_code == 409


def test_a_drifted_entry_delta_sum_is_drift_and_rebuilt(client: TestClient, db_url: str) -> None:
    ds = new_dataset(client, budget={"epsilon": 1.0, "delta": 1e-5}, adaptive=False)
    charges = f"/v1/datasets/{ds['id']}/charges"
    r = client.post(charges, json={"mechanism": OWN_DELTA})
    assert r.status_code == 201, r.text
    dry = {"mechanism": GAUSSIAN}
    assert client.post(charges, params={"dry_run": "true"}, json=dry).status_code == 409
    assert client.post("/v1/admin/verify").json()["ok"]
    recount = _ledger_delta(db_url, ds["id"])
    assert _delta_sum(db_url, "dataset_total", ds["id"]) == recount

    _drifted_to_zero_then_rebuilt(client, db_url, "dataset_total", ds["id"], dry, "delta")
    assert _delta_sum(db_url, "dataset_total", ds["id"]) == recount


def test_a_drifted_allocation_entry_delta_sum_is_drift_and_rebuilt(
    client: TestClient, db_url: str
) -> None:
    """The same for an allocation's tally, whose filter admits by its own delta sum: the
    dataset's budget is wide here, so only the allocation refuses the Gaussian."""
    ds = new_dataset(client, budget={"epsilon": 5.0, "delta": 1e-5}, adaptive=False)
    r = client.post(
        f"/v1/datasets/{ds['id']}/allocations",
        json={"name": "team", "budget": {"epsilon": 1.0, "delta": 1e-5}},
    )
    assert r.status_code == 201, r.text
    charges = f"/v1/datasets/{ds['id']}/charges"
    r = client.post(charges, json={"mechanism": OWN_DELTA, "allocation": "team"})
    assert r.status_code == 201, r.text
    dry = {"mechanism": GAUSSIAN, "allocation": "team"}
    refused = client.post(charges, params={"dry_run": "true"}, json=dry)
    assert refused.status_code == 409 and refused.json()["limit"] == "allocation", refused.text
    assert client.post("/v1/admin/verify").json()["ok"]
    recount = _ledger_delta(db_url, ds["id"])
    assert _delta_sum(db_url, "allocation", ds["id"]) == recount

    _drifted_to_zero_then_rebuilt(client, db_url, "allocation", ds["id"], dry, "allocation:team")
    assert _delta_sum(db_url, "allocation", ds["id"]) >= recount
