"""``?dry_run=true&dry_run=false`` names no one mode. FastAPI reads the last value of a
repeated query parameter, so the charge was recorded (201) although the request also asked
for a dry run (found by a black-box check). Like a repeated ``Idempotency-Key`` header, it is
refused (422) and changes nothing, on both charge routes and whatever the order of the values."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tests.conftest import new_dataset

GAUSS = {"mechanism": {"mechanism": "gaussian", "sigma": 20.0}}
EVENT = {"dp_event": {"type": "GaussianDpEvent", "noise_multiplier": 20.0}}


@pytest.mark.parametrize(
    "query",
    [
        "dry_run=true&dry_run=false",
        "dry_run=false&dry_run=true",
        "dry_run=true&dry_run=true",
    ],
)
@pytest.mark.parametrize(("path", "body"), [("charges", GAUSS), ("charges/dp_event", EVENT)])
def test_a_repeated_dry_run_is_422_and_records_nothing(
    client: TestClient, query: str, path: str, body: dict[str, object]
) -> None:
    ds = new_dataset(client)
    r = client.post(f"/v1/datasets/{ds['id']}/{path}?{query}", json=body)
    assert r.status_code == 422, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    assert "dry_run" in r.json()["detail"] and "once" in r.json()["detail"]
    budget = client.get(f"/v1/datasets/{ds['id']}/budget").json()
    assert budget["entries"] == 0
    assert client.get("/v1/rejections").json()["rejections"] == []
    # a single value still works both ways
    dry = client.post(f"/v1/datasets/{ds['id']}/{path}?dry_run=true", json=body)
    assert dry.status_code == 200, dry.text
    real = client.post(f"/v1/datasets/{ds['id']}/{path}?dry_run=false", json=body)
    assert real.status_code == 201, real.text
    assert client.get(f"/v1/datasets/{ds['id']}/budget").json()["entries"] == 1


@pytest.mark.parametrize("value", ["true", "false"])
def test_reservations_have_no_dry_run(client: TestClient, value: str) -> None:
    """A reservation route does not declare ``dry_run`` and FastAPI ignored it:
    ``POST .../reservations?dry_run=true`` made a real hold, charged when it expired (fail
    closed), and ``commit?dry_run=true`` committed. Each is a 422 naming what to ask instead,
    and changes nothing."""
    ds = new_dataset(client)["id"]
    r = client.post(f"/v1/datasets/{ds}/reservations?dry_run={value}", json=GAUSS)
    assert r.status_code == 422, r.text
    assert "dry run" in r.json()["detail"] and "charges?dry_run=true" in r.json()["detail"]
    assert client.get(f"/v1/datasets/{ds}/reservations?status=all").json()["reservations"] == []
    assert client.get(f"/v1/datasets/{ds}/budget").json().get("reserved") is None

    held = client.post(f"/v1/datasets/{ds}/reservations", json=GAUSS)
    assert held.status_code == 201, held.text
    rid = held.json()["id"]
    for answer in (
        client.post(f"/v1/reservations/{rid}/commit?dry_run={value}"),
        client.delete(f"/v1/reservations/{rid}?dry_run={value}"),
    ):
        assert answer.status_code == 422, answer.text
        assert "dry run" in answer.json()["detail"]
    assert client.get(f"/v1/reservations/{rid}").json()["status"] == "active"
    assert client.get(f"/v1/datasets/{ds}/budget").json()["entries"] == 0
    assert client.post(f"/v1/reservations/{rid}/commit").status_code == 200
    assert client.get(f"/v1/datasets/{ds}/budget").json()["entries"] == 1
