"""Edges of the (epsilon, delta) answers an outside check of DESIGN found: the delta of a
ledger with a tiny rho at epsilon = 0 (a 500), and pld datasets admitting after the entries' own
deltas, added up, had reached the budget delta (DESIGN: "once they reach the budget delta alone,
nothing more is admitted"; the other accountings refused)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tests.conftest import new_dataset


@pytest.mark.parametrize("accounting", ["rdp", "zcdp"])
@pytest.mark.parametrize("rho", [1e-100, 1e-151, 1e-300])
def test_delta_at_epsilon_zero_of_a_tiny_rho_is_answered(
    client: TestClient, accounting: str, rho: float
) -> None:
    ds = new_dataset(
        client, budget={"epsilon": 1.0, "delta": 1e-6}, accounting=accounting, adaptive=False
    )
    url = f"/v1/datasets/{ds['id']}"
    r = client.post(f"{url}/charges", json={"mechanism": {"mechanism": "zcdp", "rho": rho}})
    assert r.status_code == 201, r.text
    for eps in (0.0, 1e-300, 1e-3):
        r = client.get(f"{url}/spend", params={"epsilon": eps})
        assert r.status_code == 200, r.text
        got = r.json()["delta"]
        # the total-variation bound sqrt(1 - e^-rho) ~ sqrt(rho) caps every answer
        assert 0.0 <= got <= 1.01 * rho**0.5


@pytest.mark.parametrize("accounting", ["pld", "rdp"])
def test_own_deltas_that_add_up_to_the_budget_delta_admit_nothing_more(
    client: TestClient, accounting: str
) -> None:
    ds = new_dataset(
        client, budget={"epsilon": 1.0, "delta": 1e-6}, accounting=accounting, adaptive=False
    )
    url = f"/v1/datasets/{ds['id']}/charges"
    half = {"mechanism": {"mechanism": "approx_dp", "epsilon": 0.1, "delta": 5e-7}}
    assert client.post(url, json=half).status_code == 201
    # 5e-7 + 5e-7 == 1e-6 exactly: the second reaches the budget delta, and is refused, as is
    # anything after a refusal that leaves the deltas where they were
    r = client.post(url, json=half)
    assert r.status_code == 409, r.text
    small = {"mechanism": {"mechanism": "approx_dp", "epsilon": 0.1, "delta": 4e-7}}
    assert client.post(url, json=small).status_code == 201
    for body in (
        {"mechanism": {"mechanism": "approx_dp", "epsilon": 0.1, "delta": 1e-7}},
        {"mechanism": {"mechanism": "approx_dp", "epsilon": 0.1, "delta": 2e-7}},
    ):
        r = client.post(url, json=body)
        assert r.status_code == 409, r.text
    # a charge without a delta of its own still fits (9e-7 of the 1e-6 is taken)
    assert (
        client.post(url, json={"mechanism": {"mechanism": "laplace", "epsilon": 0.1}}).status_code
        == 201
    )
    budget = client.get(f"/v1/datasets/{ds['id']}/budget").json()
    assert budget["entries"] == 3 and budget["exhausted"] is False
