"""A DP-SGD run refused by a zcdp dataset says why zcdp is the wrong accounting for it.

zCDP keeps each entry's rho, and rho gets no amplification by subsampling: a newcomer's zcdp
dataset (epsilon 3) refused a 10-step run at sigma 2, q = 0.01 ("would become 8.85"), which an
rdp dataset of the same budget admits at a small fraction of it, and nothing said so."""

from __future__ import annotations

from fastapi.testclient import TestClient

from tests.conftest import new_dataset

RUN = {"mechanism": "subsampled_gaussian", "sigma": 2.0, "sample_rate": 0.01, "steps": 10}
BUDGET = {"epsilon": 3.0, "delta": 1e-6}


def test_a_zcdp_refusal_of_dp_sgd_points_to_rdp(client: TestClient) -> None:
    zcdp = new_dataset(client, "zc", budget=BUDGET, accounting="zcdp")
    r = client.post(f"/v1/datasets/{zcdp['id']}/charges", json={"mechanism": RUN})
    assert r.status_code == 409, r.text
    assert "no amplification by subsampling" in r.json()["detail"]
    assert "rdp dataset" in r.json()["detail"]
    rdp = new_dataset(client, "rd", budget=BUDGET, accounting="rdp")
    r = client.post(f"/v1/datasets/{rdp['id']}/charges", json={"mechanism": RUN})
    assert r.status_code == 201, r.text
    assert r.json()["spent"]["epsilon"] < BUDGET["epsilon"]
    # other refusals on a zcdp dataset are unchanged
    r = client.post(
        f"/v1/datasets/{zcdp['id']}/charges",
        json={"mechanism": {"mechanism": "laplace", "epsilon": 5}},
    )
    assert r.status_code == 409 and "subsampling" not in r.json()["detail"], r.text
