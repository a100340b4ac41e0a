"""``reserved.next_expiry`` of allocation and block views: the earliest expiry among the active
holds counted in that allocation or block (as a dataset's view gives the dataset's), not null
and not the dataset's. Expected values are the holds' own ``expires_at`` as their creation
answered them, picked by which holds each view counts (``verify``'s rule)."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from tests.conftest import new_allocation, new_dataset

LAPLACE = {"mechanism": "laplace", "epsilon": 0.01}


def _hold(client: TestClient, ds: str, ttl: int, **body: Any) -> dict[str, Any]:
    r = client.post(
        f"/v1/datasets/{ds}/reservations",
        json={"mechanism": LAPLACE, "ttl_seconds": ttl, **body},
    )
    assert r.status_code == 201, r.text
    return dict(r.json())


def _allocation(client: TestClient, ds: str, name: str) -> dict[str, Any]:
    r = client.get(f"/v1/datasets/{ds}/allocations/{name}")
    assert r.status_code == 200, r.text
    return dict(r.json())


def _expiry(view: dict[str, Any]) -> Any:
    return None if view["reserved"] is None else view["reserved"]["next_expiry"]


def test_an_allocation_reports_the_earliest_of_its_own_holds(client: TestClient) -> None:
    ds = new_dataset(client, "alloc-expiry", budget={"epsilon": 5.0, "delta": 1e-5})["id"]
    for name in ("team-a", "team-b"):
        new_allocation(client, ds, name, 1.0)
    late = _hold(client, ds, 3600, allocation="team-a")
    early = _hold(client, ds, 600, allocation="team-a")
    dataset_only = _hold(client, ds, 60)  # not through an allocation: the dataset's alone
    other = _hold(client, ds, 120, allocation="team-b")

    a = _allocation(client, ds, "team-a")
    assert a["reserved"]["count"] == 2
    assert _expiry(a) == early["expires_at"]
    assert _expiry(_allocation(client, ds, "team-b")) == other["expires_at"]
    budget = client.get(f"/v1/datasets/{ds}/budget").json()
    assert budget["reserved"]["next_expiry"] == dataset_only["expires_at"]
    listed = {
        x["name"]: x for x in client.get(f"/v1/datasets/{ds}/allocations").json()["allocations"]
    }
    assert _expiry(listed["team-a"]) == early["expires_at"]

    # released: the next one takes its place; a charge's answer says the same
    assert client.delete(f"/v1/reservations/{early['id']}").status_code == 200
    r = client.post(
        f"/v1/datasets/{ds}/charges", json={"mechanism": LAPLACE, "allocation": "team-a"}
    )
    assert r.status_code == 201, r.text
    assert _expiry(r.json()["allocation"]) == late["expires_at"]
    dry = client.post(
        f"/v1/datasets/{ds}/charges",
        json={"mechanism": LAPLACE, "allocation": "team-a"},
        params={"dry_run": "true"},
    )
    assert dry.status_code == 200 and _expiry(dry.json()["allocation"]) == late["expires_at"]
    # committed: nothing held, nothing to expire
    assert client.post(f"/v1/reservations/{late['id']}/commit").status_code == 200
    assert _allocation(client, ds, "team-a")["reserved"] is None


def test_blocks_report_the_earliest_hold_covering_them(client: TestClient) -> None:
    ds = new_dataset(
        client,
        "block-expiry",
        budget={"epsilon": 1.0, "delta": 1e-6},
        adaptive=False,
        partition={"unit": "day"},
    )["id"]
    new_allocation(client, ds, "team", 0.5, delta=1e-7)
    first = _hold(client, ds, 600, blocks={"from": "2026-11-01", "to": "2026-11-02"})
    second = _hold(
        client, ds, 3600, blocks={"from": "2026-11-02", "to": "2026-11-03"}, allocation="team"
    )
    span = {"from": "2026-10-31", "to": "2026-11-03"}
    got = client.get(f"/v1/datasets/{ds}/blocks", params=span)
    assert got.status_code == 200, got.text
    by_key = {b["block"]: _expiry(b) for b in got.json()["blocks"]}
    assert by_key == {
        "2026-10-31": None,
        "2026-11-01": first["expires_at"],
        "2026-11-02": first["expires_at"],  # both cover it: the earlier
        "2026-11-03": second["expires_at"],
    }
    # the allocation's share of each block counts only the hold made through it
    mine = client.get(f"/v1/datasets/{ds}/blocks", params={**span, "allocation": "team"})
    assert {b["block"]: _expiry(b) for b in mine.json()["blocks"]} == {
        "2026-10-31": None,
        "2026-11-01": None,
        "2026-11-02": second["expires_at"],
        "2026-11-03": second["expires_at"],
    }
    # a charge's answer lists its blocks with theirs
    r = client.post(
        f"/v1/datasets/{ds}/charges",
        json={"mechanism": LAPLACE, "blocks": {"from": "2026-11-01", "to": "2026-11-03"}},
    )
    assert r.status_code == 201, r.text
    assert [_expiry(b) for b in r.json()["blocks"]] == [
        first["expires_at"],
        first["expires_at"],
        second["expires_at"],
    ]
    # the dataset's most-spent block (every block charged equally: the first key) says it too
    most = client.get(f"/v1/datasets/{ds}/budget").json()["blocks"]["most_spent"]
    assert _expiry(most) == by_key[most["block"]]
    # the allocation's view (its most-spent block's figures, holds counted)
    assert _expiry(_allocation(client, ds, "team")) == second["expires_at"]
