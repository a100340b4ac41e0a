"""verify compared neither the stored next expiry of a dataset's holds nor a ``pld`` dataset's
held distribution with what its active reservations give, and --rebuild left both as they were.

* ``held_next_expiry`` is what ``settle`` looks at before it charges due holds into the ledger
  (fail closed). Drifted to none (or later than the earliest hold), due holds were never charged
  and their pipeline could still release them: budget the expiry should have charged, dropped.
* A ``pld`` dataset admits on its ledger's PLD composed with its held PLD: a held PLD lost
  under-counts what is held.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from fastapi.testclient import TestClient

from app.accounting import pld_mechanisms as pm
from app.accounting.pld import interval_for_budget
from tests.conftest import new_dataset, run_sql

HOLDS = [{"mechanism": "laplace", "epsilon": 0.2}, {"mechanism": "gaussian", "sigma": 6.0}]


def _reserve(client: TestClient, ds: dict, ttl: int = 600) -> list[str]:
    ids = []
    for m in HOLDS:
        r = client.post(
            f"/v1/datasets/{ds['id']}/reservations", json={"mechanism": m, "ttl_seconds": ttl}
        )
        assert r.status_code == 201, r.text
        ids.append(r.json()["id"])
    return ids


def _mine(report: dict, ds: dict) -> dict:
    (mine,) = [d for d in report["datasets"] if d["dataset_id"] == ds["id"]]
    return mine


def test_a_due_hold_hidden_by_a_drifted_expiry_is_charged_after_rebuild(
    client: TestClient, db_url: str
) -> None:
    """The holds fall due (their expiry moved into the past) while the stored next expiry says
    none: settle skips them and verify (which settles first) must report the drift; after the
    rebuild the next write charges them into the ledger, as expiry always does."""
    ds = new_dataset(client, budget={"epsilon": 5.0, "delta": 1e-6})
    ids = _reserve(client, ds)
    past = datetime.now(UTC) - timedelta(hours=1)
    run_sql(
        db_url, "UPDATE reservation SET expires_at = :t WHERE dataset_id = :d", t=past, d=ds["id"]
    )
    run_sql(
        db_url, "UPDATE dataset_total SET held_next_expiry = NULL WHERE dataset_id = :d", d=ds["id"]
    )

    mine = _mine(client.post("/v1/admin/verify").json(), ds)
    assert not mine["ok"] and mine["drift"] == ["held_next_expiry"], mine
    assert client.get(f"/v1/datasets/{ds['id']}/budget").json()["entries"] == 0
    client.post("/v1/admin/verify", params={"rebuild": "true"})
    assert _mine(client.post("/v1/admin/verify").json(), ds)["ok"]
    # the verify after the rebuild took the lock and settled: both holds are ledger entries
    assert client.get(f"/v1/datasets/{ds['id']}/budget").json()["entries"] == len(HOLDS)
    for rid in ids:
        status = client.get(f"/v1/reservations/{rid}").json()["status"]
        assert status == "expired"


def test_a_pld_datasets_held_distribution_is_verified_and_rebuilt(
    client: TestClient, db_url: str
) -> None:
    ds = new_dataset(
        client, budget={"epsilon": 5.0, "delta": 1e-6}, accounting="pld", adaptive=False
    )
    _reserve(client, ds)
    assert _mine(client.post("/v1/admin/verify").json(), ds)["ok"]
    (good,) = run_sql(db_url, "SELECT held FROM dataset_pld WHERE dataset_id = :d", d=ds["id"])
    assert good[0] is not None

    # lost: admission would compose the ledger with nothing held
    run_sql(db_url, "UPDATE dataset_pld SET held = NULL WHERE dataset_id = :d", d=ds["id"])
    mine = _mine(client.post("/v1/admin/verify").json(), ds)
    assert not mine["ok"] and mine["drift"] == ["pld_held"], mine
    client.post("/v1/admin/verify", params={"rebuild": "true"})
    assert _mine(client.post("/v1/admin/verify").json(), ds)["ok"]

    # one hold's distribution in place of both's
    part = pm.compose_all(HOLDS[:1], interval=interval_for_budget(5.0, 1e-6))
    run_sql(
        db_url,
        "UPDATE dataset_pld SET held = :b WHERE dataset_id = :d",
        b=part.to_bytes(),
        d=ds["id"],
    )
    mine = _mine(client.post("/v1/admin/verify").json(), ds)
    assert not mine["ok"] and mine["drift"] == ["pld_held"], mine
    client.post("/v1/admin/verify", params={"rebuild": "true"})
    assert _mine(client.post("/v1/admin/verify").json(), ds)["ok"]
