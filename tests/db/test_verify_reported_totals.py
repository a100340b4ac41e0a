"""verify compares what the totals row reports, not only what admission reads: the stored spend
(``spent_epsilon`` / ``spent_method``: what ``GET /budget``, the dashboard and the metrics show,
and what ``exhausted`` is decided on), the per-kind counts and the last entry's time. Admission
converts the composed curve afresh, so none of them can let a charge through; but with the
stored spend drifted low, ``/budget`` reported a tenth of what the ledger spends, ``verify``
said ok and ``--rebuild`` left it (a reported number too small is a privacy breach)."""

from __future__ import annotations

import math
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.accounting.filters import Spend
from app.services.verification import _spend_drift
from tests.conftest import new_dataset, run_sql

CHARGES = [
    {"mechanism": "gaussian", "sigma": 2.0},
    {"mechanism": "laplace", "epsilon": 0.2, "count": 2},
    {"mechanism": "gaussian", "sigma": 3.0},
]


def _charged(client: TestClient, **fields: Any) -> dict[str, Any]:
    """A dataset with ``CHARGES`` on its ledger; its budget view after them."""
    ds = new_dataset(client, budget={"epsilon": 10.0, "delta": 1e-6}, **fields)
    for mechanism in CHARGES:
        r = client.post(f"/v1/datasets/{ds['id']}/charges", json={"mechanism": mechanism})
        assert r.status_code == 201, r.text
    view = client.get(f"/v1/datasets/{ds['id']}/budget").json()
    assert client.post("/v1/admin/verify").json()["ok"]
    return view


def _drift_then_rebuild(client: TestClient, view: dict[str, Any], drift: str) -> dict[str, Any]:
    """verify names exactly ``drift``; --rebuild repairs it; the budget view is the original."""
    report = client.post("/v1/admin/verify").json()
    assert not report["ok"] and report["datasets"][0]["drift"] == [drift], report
    rebuilt = client.post("/v1/admin/verify", params={"rebuild": "true"}).json()
    assert rebuilt["datasets"][0].get("rebuilt") is True, rebuilt
    assert client.post("/v1/admin/verify").json()["ok"]
    after: dict[str, Any] = client.get(f"/v1/datasets/{view['dataset_id']}/budget").json()
    assert after == view
    return after


@pytest.mark.parametrize("accounting", ["rdp", "zcdp", "pld"])
def test_a_stored_spend_drifted_low_is_drift_and_rebuilt(
    client: TestClient, db_url: str, accounting: str
) -> None:
    view = _charged(client, accounting=accounting, adaptive=False)
    spent = view["spent"]["epsilon"]
    assert spent > 0.1
    run_sql(
        db_url,
        "UPDATE dataset_total SET spent_epsilon = :v WHERE dataset_id = :d",
        v=spent / 10,
        d=view["dataset_id"],
    )
    shown = client.get(f"/v1/datasets/{view['dataset_id']}/budget").json()
    assert shown["spent"]["epsilon"] == pytest.approx(spent / 10)  # what the drift does
    after = _drift_then_rebuild(client, view, "spent")
    assert after["spent"]["epsilon"] == spent


@pytest.mark.parametrize(
    ("column", "value", "drift"),
    [
        ("spent_method", "zcdp", "spent"),
        (  # the laplace entries left out
            "mechanism_counts",
            '{"gaussian": {"entries": 2, "count": 2, "rho": 0.18055555555555555}}',
            "mechanism_counts",
        ),
        ("last_entry_at", None, "last_entry_at"),
    ],
)
def test_a_drifted_reported_total_is_drift_and_rebuilt(
    client: TestClient, db_url: str, column: str, value: str | None, drift: str
) -> None:
    view = _charged(client, adaptive=False)
    ((stored,),) = run_sql(
        db_url, f"SELECT {column} FROM dataset_total WHERE dataset_id = :d", d=view["dataset_id"]
    )
    assert stored is not None and str(stored) != value
    if column == "mechanism_counts":
        assert "laplace" in str(stored)
    run_sql(
        db_url,
        f"UPDATE dataset_total SET {column} = :v WHERE dataset_id = :d",
        v=value,
        d=view["dataset_id"],
    )
    _drift_then_rebuild(client, view, drift)


def test_an_allocations_stored_spend_drifted_low_is_drift_and_rebuilt(
    client: TestClient, db_url: str
) -> None:
    """The same for an allocation's tally: its views report its stored spend."""
    ds = new_dataset(client, budget={"epsilon": 10.0, "delta": 1e-6}, adaptive=False)
    allocations = f"/v1/datasets/{ds['id']}/allocations"
    r = client.post(allocations, json={"name": "team", "budget": {"epsilon": 5.0, "delta": 1e-6}})
    assert r.status_code == 201, r.text
    for mechanism in CHARGES:
        r = client.post(
            f"/v1/datasets/{ds['id']}/charges", json={"mechanism": mechanism, "allocation": "team"}
        )
        assert r.status_code == 201, r.text
    before = client.get(allocations).json()
    assert client.post("/v1/admin/verify").json()["ok"]
    run_sql(
        db_url,
        "UPDATE allocation SET spent_epsilon = spent_epsilon / 10 WHERE dataset_id = :d",
        d=ds["id"],
    )
    assert client.get(allocations).json() != before  # what the drift does
    report = client.post("/v1/admin/verify").json()
    assert not report["ok"] and report["datasets"][0]["drift"] == ["allocation:team"], report
    client.post("/v1/admin/verify", params={"rebuild": "true"})
    assert client.post("/v1/admin/verify").json()["ok"]
    # a rebuilt tally holds the upper bound of its range sums: the same spend to rounding
    spent = before["allocations"][0]["spent"]["epsilon"]
    rebuilt = client.get(allocations).json()["allocations"][0]["spent"]["epsilon"]
    assert spent <= rebuilt == pytest.approx(spent, rel=1e-12)


def test_a_stored_spend_a_few_ulps_off_is_not_drift(client: TestClient, db_url: str) -> None:
    """Another machine of the deployment may round the conversion's logarithms differently in
    the last ulps: such a spend is the same spend (verify's 1e-12, as for entry curves)."""
    view = _charged(client, adaptive=False)
    spent = view["spent"]["epsilon"]
    nudged = math.nextafter(math.nextafter(spent, math.inf), math.inf)
    run_sql(
        db_url,
        "UPDATE dataset_total SET spent_epsilon = :v WHERE dataset_id = :d",
        v=nudged,
        d=view["dataset_id"],
    )
    assert client.post("/v1/admin/verify").json()["ok"]


def test_spend_drift_takes_ties_between_methods_as_the_same_spend() -> None:
    fresh = Spend(1.5, 1e-6, "rdp_improved", 4.0, {"rdp_improved": 1.5, "zcdp": 1.5 + 1e-15})
    same_but_tied = Spend(1.5, 1e-6, "zcdp")
    assert not _spend_drift(same_but_tied, fresh)
    assert _spend_drift(Spend(1.5, 1e-6, "pld"), fresh)  # no such candidate
    assert _spend_drift(Spend(1.5 * (1 - 1e-9), 1e-6, "rdp_improved"), fresh)
    assert _spend_drift(
        Spend(1.5, 1e-6, "zcdp"),
        Spend(1.5, 1e-6, "rdp_improved", 4.0, {"rdp_improved": 1.5, "zcdp": 1.6}),
    )
    inf = math.inf
    assert not _spend_drift(Spend(inf, 1e-6, "rdp_improved"), Spend(inf, 1e-6, "rdp_improved"))
