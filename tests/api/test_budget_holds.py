"""Issue 16 item 4: active holds count in ``remaining``, with ``reserved`` beside it.

Expected values come from the ledger path: a hold committed into the ledger must leave
``remaining`` where the hold had put it, and the spend must grow by what ``reserved`` said.
"""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.conftest import new_dataset


def _budget(client: TestClient, ds: dict[str, Any]) -> dict[str, Any]:
    r = client.get(f"/v1/datasets/{ds['id']}/budget")
    assert r.status_code == 200, r.text
    return dict(r.json())


@pytest.mark.parametrize(
    ("accounting", "mechanism"),
    [
        ("rdp", {"mechanism": "laplace", "epsilon": 0.2}),
        ("zcdp", {"mechanism": "gaussian", "sigma": 10.0, "sensitivity": 1.0}),
    ],
)
def test_hold_lowers_remaining_as_its_commit_would(
    client: TestClient, accounting: str, mechanism: dict[str, Any]
) -> None:
    ds = new_dataset(client, accounting=accounting)
    url = f"/v1/datasets/{ds['id']}"
    assert client.post(f"{url}/charges", json={"mechanism": mechanism}).status_code == 201
    b0 = _budget(client, ds)
    assert b0["reserved"] is None
    assert client.get(f"{url}/reservations").json() == {"reservations": [], "total": 0}

    hold = client.post(f"{url}/reservations", json={"mechanism": mechanism, "ttl_seconds": 3600})
    assert hold.status_code == 201
    b1 = _budget(client, ds)
    assert b1["spent"] == b0["spent"] and b1["entries"] == b0["entries"]
    reserved = b1["reserved"]
    assert reserved["count"] == 1
    assert reserved["next_expiry"] == hold.json()["expires_at"]
    assert reserved["epsilon"] > 0
    assert b1["remaining"]["epsilon"] < b0["remaining"]["epsilon"]
    if accounting == "zcdp":  # rho is exact under the rho filter: the hold's rho is subtracted
        assert b1["remaining"]["rho"] == pytest.approx(
            b0["remaining"]["rho"] - hold.json()["rho"], rel=1e-12
        )
    # the dataset answer says the same
    one = client.get(url).json()
    assert one["remaining"] == b1["remaining"] and one["reserved"] == reserved

    listed = client.get(f"{url}/reservations", params={"status": "active"}).json()
    assert listed["total"] == 1
    assert listed["reservations"][0]["id"] == hold.json()["id"]
    assert listed["reservations"][0]["expires_at"] == hold.json()["expires_at"]

    # committing the hold puts the same curve in the ledger: remaining does not move, and the
    # spend grows by what `reserved` announced
    assert client.post(f"/v1/reservations/{hold.json()['id']}/commit").status_code == 200
    b2 = _budget(client, ds)
    assert b2["reserved"] is None
    assert b2["remaining"]["epsilon"] == pytest.approx(b1["remaining"]["epsilon"], rel=1e-9)
    assert b2["spent"]["epsilon"] - b0["spent"]["epsilon"] == pytest.approx(
        reserved["epsilon"], rel=1e-9
    )
    assert client.get(f"{url}/reservations").json()["total"] == 0
    assert client.get(f"{url}/reservations", params={"status": "committed"}).json()["total"] == 1
    assert client.get(f"{url}/reservations", params={"status": "all"}).json()["total"] == 1

    # a released hold gives its budget back
    again = client.post(f"{url}/reservations", json={"mechanism": mechanism, "ttl_seconds": 60})
    assert _budget(client, ds)["remaining"]["epsilon"] < b2["remaining"]["epsilon"]
    assert client.delete(f"/v1/reservations/{again.json()['id']}").status_code == 200
    assert _budget(client, ds)["remaining"] == b2["remaining"]


def test_reservation_listing_is_viewer_and_validated(client: TestClient) -> None:
    ds = new_dataset(client)
    viewer = client.post("/v1/keys", json={"role": "viewer"}).json()
    url = f"/v1/datasets/{ds['id']}/reservations"
    r = client.get(url, headers={"Authorization": f"Bearer {viewer['key']}"})
    assert r.status_code == 200 and r.json()["total"] == 0
    assert client.get(url, params={"status": "pending"}).status_code == 422
    assert client.get("/v1/datasets/nope/reservations").status_code == 404


def test_a_calibrated_answer_on_the_edge_is_admitted_with_holds(client: TestClient) -> None:
    """A random search's case: the pure-DP answer lands exactly on the budget, where
    (committed + new) + held summed one ulp above (committed + held) + new, the sum the
    calibration (and ``remaining``) start from; the dry run of the answer was a 409."""
    ds = new_dataset(client, budget={"epsilon": 0.5, "delta": 1e-6})  # adaptive rdp
    url = f"/v1/datasets/{ds['id']}"
    for m in (
        {"mechanism": "laplace", "epsilon": 0.012796990143953722},
        {"mechanism": "rappor", "epsilon": 0.013353539227190035, "count": 3},
    ):
        assert client.post(f"{url}/charges", json={"mechanism": m}).status_code == 201
    held = {"mechanism": "rappor", "epsilon": 0.011809390718123987}
    hold = client.post(f"{url}/reservations", json={"mechanism": held, "ttl_seconds": 600})
    assert hold.status_code == 201, hold.text
    cal = client.get(f"{url}/calibrate", params={"mechanism": "pure_dp"})
    assert cal.status_code == 200, cal.text
    mechanism = cal.json()["mechanism"]
    # what remains, less the slack admission keeps for holds committed in another order
    left = _budget(client, ds)["remaining"]["epsilon"]
    assert left * (1 - 1e-12) <= mechanism["epsilon"] <= left
    dry = client.post(f"{url}/charges", params={"dry_run": "true"}, json={"mechanism": mechanism})
    assert dry.status_code == 200, dry.text
    assert client.post(f"{url}/charges", json={"mechanism": mechanism}).status_code == 201


@pytest.mark.parametrize("accounting", ["rdp", "zcdp"])
def test_a_refusal_states_the_figure_compared_with_holds(
    client: TestClient, accounting: str
) -> None:
    """The 409 detail said the spend 'would reach 0.7 (with active reservations counted),
    above the budget 1': 0.7 was the spend without the holds the admission had counted."""
    ds = new_dataset(client, accounting=accounting, adaptive=False)
    url = f"/v1/datasets/{ds['id']}"
    g = {"mechanism": "gaussian", "sigma": 6.0}
    assert client.post(f"{url}/charges", json={"mechanism": g}).status_code == 201
    hold = client.post(f"{url}/reservations", json={"mechanism": g, "ttl_seconds": 600})
    assert hold.status_code == 201, hold.text
    r = client.post(f"{url}/charges", params={"dry_run": "true"}, json={"mechanism": g})
    assert r.status_code == 409, r.text
    problem = r.json()
    assert problem["would_spend"]["epsilon"] < 1.0  # the charge alone would fit
    figure = float(problem["detail"].split("would reach ")[1].split(" ")[0])
    if accounting == "zcdp":  # rho against the filter's bound
        bound = float(problem["detail"].split("bound ")[1].split(" ")[0])
        assert figure > bound
    else:
        assert figure > 1.0


def test_allocation_and_block_views_count_their_holds(client: TestClient) -> None:
    """An allocation's and a block's `remaining` is after their active holds, as the dataset's
    is and as their admission counts them: a commit leaves it where the hold put it, and the
    spend grows by `reserved.epsilon` (they reported `remaining` without the holds)."""
    ds = new_dataset(client, accounting="rdp", adaptive=False, partition={"unit": "day"})
    url = f"/v1/datasets/{ds['id']}"
    team = {"name": "team", "budget": {"epsilon": 0.8, "delta": 1e-6}}
    assert client.post(f"{url}/allocations", json=team).status_code == 201
    day = {"from": "2026-11-02", "to": "2026-11-02"}
    g = {"mechanism": "gaussian", "sigma": 9.0}
    body = {"mechanism": g, "allocation": "team", "blocks": day}
    assert client.post(f"{url}/charges", json=body).status_code == 201

    def views() -> tuple[dict[str, Any], dict[str, Any]]:
        a = client.get(f"{url}/allocations/team").json()
        b = client.get(f"{url}/blocks", params={"from": day["from"], "to": day["to"]}).json()
        return a, b["blocks"][0]

    before = views()
    hold = client.post(f"{url}/reservations", json={**body, "ttl_seconds": 600})
    assert hold.status_code == 201, hold.text
    held = views()
    for b, h in zip(before, held, strict=True):
        assert h["remaining"]["epsilon"] < b["remaining"]["epsilon"]
        assert h["reserved"]["count"] == 1 and h["reserved"]["epsilon"] > 0.0
    assert client.post(f"/v1/reservations/{hold.json()['id']}/commit").status_code == 200
    after = views()
    for b, h, a in zip(before, held, after, strict=True):
        assert abs(a["remaining"]["epsilon"] - h["remaining"]["epsilon"]) <= 1e-12
        growth = a["spent"]["epsilon"] - b["spent"]["epsilon"]
        assert abs(growth - h["reserved"]["epsilon"]) <= 1e-12


def test_a_pld_refusal_with_holds_quotes_no_figure_it_did_not_compare(client: TestClient) -> None:
    """A pld dataset's 409 beside a hold said 'would reach 0.834 (with active reservations
    counted), above the budget 1': 0.834 was the spend without the hold."""
    ds = new_dataset(
        client, accounting="pld", adaptive=False, budget={"epsilon": 1.0, "delta": 1e-6}
    )
    url = f"/v1/datasets/{ds['id']}"
    hold = client.post(
        f"{url}/reservations", json={"mechanism": {"mechanism": "gaussian", "sigma": 6.0}}
    )
    assert hold.status_code == 201, hold.text
    r = client.post(f"{url}/charges", json={"mechanism": {"mechanism": "gaussian", "sigma": 5.0}})
    assert r.status_code == 409, r.text
    problem = r.json()
    assert problem["would_spend"]["epsilon"] < 1.0
    assert "1 active reservation" in problem["detail"] and "alone" in problem["detail"]
    assert "(with active reservations counted), above" not in problem["detail"]
