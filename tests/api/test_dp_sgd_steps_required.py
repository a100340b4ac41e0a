"""A DP-SGD run names its number of steps: ``steps`` has no default.

A newcomer's walkthrough found that a charge, a reservation, a compose or a calibration of
``subsampled_gaussian`` without ``steps`` was taken as one step (the field defaulted to 1), so
a pipeline that left it out under-charged a 3,000-step run by a factor of 3,000, silently. Each
is now a 422 naming ``steps``, and nothing is charged or held."""

from __future__ import annotations

import inspect

from fastapi.testclient import TestClient
from privacy_ledger_client import subsampled_gaussian

from tests.conftest import new_dataset

RUN = {"mechanism": "subsampled_gaussian", "sigma": 3.0, "sample_rate": 0.01}


def test_charges_reservations_and_compose_refuse_a_run_without_steps(
    client: TestClient,
) -> None:
    url = f"/v1/datasets/{new_dataset(client, adaptive=False)['id']}"
    for path in (f"{url}/charges", f"{url}/reservations"):
        r = client.post(path, json={"mechanism": RUN})
        assert r.status_code == 422, r.text
        assert "steps" in r.json()["detail"], r.text
    r = client.post("/v1/accounting/compose", json={"mechanisms": [RUN], "delta": 1e-6})
    assert r.status_code == 422 and "steps" in r.json()["detail"], r.text
    budget = client.get(f"{url}/budget").json()
    assert budget["entries"] == 0 and budget["spent"]["epsilon"] == 0.0
    assert client.get(f"{url}/reservations").json()["reservations"] == []
    r = client.post(f"{url}/charges", json={"mechanism": {**RUN, "steps": 3000}})
    assert r.status_code == 201, r.text
    assert r.json()["entry"]["mechanism"]["steps"] == 3000


def test_calibrating_the_noise_needs_the_steps(client: TestClient) -> None:
    url = f"/v1/datasets/{new_dataset(client, adaptive=False)['id']}"
    asked = {"mechanism": "subsampled_gaussian", "sample_rate": 0.01}
    r = client.get(f"{url}/calibrate", params=asked)
    assert r.status_code == 422, r.text
    assert r.json()["detail"] == (
        "calibrating subsampled_gaussian sigma needs steps (query parameter)"
    )
    one = client.get(f"{url}/calibrate", params={**asked, "steps": 1})
    many = client.get(f"{url}/calibrate", params={**asked, "steps": 3000})
    assert one.status_code == many.status_code == 200, (one.text, many.text)
    assert many.json()["mechanism"]["sigma"] > one.json()["mechanism"]["sigma"]


def test_the_client_helper_has_no_default_for_steps() -> None:
    steps = inspect.signature(subsampled_gaussian).parameters["steps"]
    assert steps.default is inspect.Parameter.empty
    assert subsampled_gaussian(1.1, 0.01, 3000)["steps"] == 3000
