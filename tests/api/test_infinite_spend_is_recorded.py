"""A refusal whose requested epsilon is infinite (an entry's own delta reaches the budget's) is
a 409 recorded like any other, on PostgreSQL too: its JSON holds null, as the answer does (the
JSON columns got ``Infinity``, which PostgreSQL refuses: a 500 with nothing recorded)."""

from __future__ import annotations

from fastapi.testclient import TestClient

from tests.conftest import new_dataset

TOO_MUCH_DELTA = {"mechanism": "approx_dp", "epsilon": 0.5, "delta": 1e-6}


def test_refusals_with_an_infinite_epsilon_are_409_and_recorded(client: TestClient) -> None:
    ds = new_dataset(
        client, budget={"epsilon": 10.0, "delta": 1e-6}, accounting="rdp", adaptive=False
    )
    url = f"/v1/datasets/{ds['id']}"
    refused = [
        client.post(f"{url}/charges", json={"mechanism": TOO_MUCH_DELTA}),
        client.post(
            f"{url}/charges",
            json={"mechanism": TOO_MUCH_DELTA},
            headers={"Idempotency-Key": "inf-1"},
        ),
        client.post(f"{url}/reservations", json={"mechanism": TOO_MUCH_DELTA}),
        client.post(
            f"{url}/charges/dp_event",
            json={"dp_event": {"type": "EpsilonDeltaDpEvent", "epsilon": 0.5, "delta": 1e-6}},
        ),
    ]
    for r in refused:
        assert r.status_code == 409, r.text
        assert r.json()["requested"]["epsilon"] is None
    again = client.post(
        f"{url}/charges", json={"mechanism": TOO_MUCH_DELTA}, headers={"Idempotency-Key": "inf-1"}
    )
    assert again.status_code == 409 and again.json()["requested"] == refused[1].json()["requested"]
    rows = client.get("/v1/rejections", params={"dataset_id": ds["id"]}).json()["rejections"]
    assert len(rows) == 4
    assert all(row["requested"]["epsilon"] is None for row in rows)
    assert client.get(f"{url}/budget").json()["entries"] == 0


def test_spend_query_answers_null_for_no_finite_epsilon_and_bounds_epsilon(
    client: TestClient,
) -> None:
    """GET /spend: the schema's epsilon is nullable (null where no finite epsilon holds: it
    said number and answered null); an epsilon above the largest budget epsilon is 422 (1e154
    was an OverflowError, a 500; 1e150 a raw solver message); delta never rises with epsilon."""
    for accounting, adaptive in (("rdp", False), ("zcdp", False), ("zcdp", True), ("pld", False)):
        ds = new_dataset(
            client,
            f"q-{accounting}-{adaptive}",
            budget={"epsilon": 10.0, "delta": 1e-6},
            accounting=accounting,
            adaptive=adaptive,
        )
        url = f"/v1/datasets/{ds['id']}"
        charged = client.post(
            f"{url}/charges", json={"mechanism": {"mechanism": "gaussian", "sigma": 5.0}}
        )
        assert charged.status_code == 201, charged.text
        tiny = client.get(f"{url}/spend", params={"delta": 1e-300})
        assert tiny.status_code == 200, tiny.text
        assert tiny.json()["epsilon"] is None or tiny.json()["epsilon"] > 0
        for too_big in (1.0000001e6, 1e150, 1.35e154, 1e308):
            r = client.get(f"{url}/spend", params={"epsilon": too_big})
            assert r.status_code == 422, (accounting, too_big, r.text)
        deltas = [
            client.get(f"{url}/spend", params={"epsilon": e}).json()["delta"]
            for e in (0.0, 1.0, 10.0, 1e3, 1e6)
        ]
        assert deltas == sorted(deltas, reverse=True), (accounting, adaptive, deltas)
