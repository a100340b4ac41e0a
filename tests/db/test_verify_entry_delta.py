"""verify compares the stored sum of the entries' own deltas with the ledger's: admission
converts at the budget delta less that sum, so a stored sum drifted low admits charges the
ledger does not have room for. verify compared rho, RDP, pure epsilon, the Gaussian flag and the
count, not the delta: with it drifted to 0 the report was 'ok' (and --rebuild left it), and a
Gaussian the ledger refuses was admitted."""

from __future__ import annotations

from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text

from tests.conftest import new_dataset

OWN_DELTA = {"mechanism": "approx_dp", "epsilon": 0.05, "delta": 9e-6}
GAUSSIAN = {"mechanism": "gaussian", "sigma": 4.5}
"""Fits a budget of (1, 1e-5) at delta 1e-5 but not at the 1e-6 the entry above leaves."""


def _stored_delta(db_url: str, dataset_id: str, drifted: float | None = None) -> float:
    """The totals row's sum of entry deltas (after writing ``drifted`` in its place, if given)."""
    engine = create_engine(db_url)
    try:
        with engine.begin() as conn:
            if drifted is not None:
                conn.execute(
                    text("UPDATE dataset_total SET delta = :v WHERE dataset_id = :d"),
                    {"v": drifted, "d": dataset_id},
                )
            return float(
                conn.execute(
                    text("SELECT delta FROM dataset_total WHERE dataset_id = :d"),
                    {"d": dataset_id},
                ).scalar_one()
            )
    finally:
        engine.dispose()


def _ledger_delta(db_url: str, dataset_id: str) -> float:
    """The recount: the one entry's own delta as the ledger stores it."""
    engine = create_engine(db_url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                text("SELECT delta FROM ledger_entry WHERE dataset_id = :d"), {"d": dataset_id}
            ).scalars()
            (delta,) = list(rows)
            return float(delta)
    finally:
        engine.dispose()


def test_a_drifted_entry_delta_sum_is_drift_and_rebuilt(client: TestClient, db_url: str) -> None:
    ds = new_dataset(client, budget={"epsilon": 1.0, "delta": 1e-5}, adaptive=False)
    charges = f"/v1/datasets/{ds['id']}/charges"
    r = client.post(charges, json={"mechanism": OWN_DELTA})
    assert r.status_code == 201, r.text
    dry = {"mechanism": GAUSSIAN}
    assert client.post(charges, params={"dry_run": "true"}, json=dry).status_code == 409
    assert client.post("/v1/admin/verify").json()["ok"]
    recount = _ledger_delta(db_url, ds["id"])
    assert _stored_delta(db_url, ds["id"]) == recount

    _stored_delta(db_url, ds["id"], drifted=0.0)
    # what the drift does: the Gaussian the ledger has no room for is now admitted
    assert client.post(charges, params={"dry_run": "true"}, json=dry).status_code == 200
    report = client.post("/v1/admin/verify").json()
    assert not report["ok"] and report["datasets"][0]["drift"] == ["delta"], report

    rebuilt = client.post("/v1/admin/verify", params={"rebuild": "true"}).json()
    assert rebuilt["datasets"][0].get("rebuilt") is True, rebuilt
    assert client.post("/v1/admin/verify").json()["ok"]
    assert _stored_delta(db_url, ds["id"]) == recount
    assert client.post(charges, params={"dry_run": "true"}, json=dry).status_code == 409


def _allocation_delta(db_url: str, dataset_id: str, drifted: float | None = None) -> float:
    """The allocation's stored sum of entry deltas (after writing ``drifted``, if given)."""
    engine = create_engine(db_url)
    try:
        with engine.begin() as conn:
            if drifted is not None:
                conn.execute(
                    text("UPDATE allocation SET delta = :v WHERE dataset_id = :d"),
                    {"v": drifted, "d": dataset_id},
                )
            return float(
                conn.execute(
                    text("SELECT delta FROM allocation WHERE dataset_id = :d"), {"d": dataset_id}
                ).scalar_one()
            )
    finally:
        engine.dispose()


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
    assert _allocation_delta(db_url, ds["id"]) == recount

    _allocation_delta(db_url, ds["id"], drifted=0.0)
    assert client.post(charges, params={"dry_run": "true"}, json=dry).status_code == 200
    report = client.post("/v1/admin/verify").json()
    assert not report["ok"] and report["datasets"][0]["drift"] == ["allocation:team"], report

    rebuilt = client.post("/v1/admin/verify", params={"rebuild": "true"}).json()
    assert rebuilt["datasets"][0].get("rebuilt") is True, rebuilt
    assert client.post("/v1/admin/verify").json()["ok"]
    assert _allocation_delta(db_url, ds["id"]) >= recount
    assert client.post(charges, params={"dry_run": "true"}, json=dry).status_code == 409
