"""Edges of the (epsilon, delta) answers an outside check of DESIGN found: the delta of a
ledger with a tiny rho at epsilon = 0 (a 500), and pld datasets admitting after the entries' own
deltas, added up, had reached the budget delta (DESIGN: "once they reach the budget delta alone,
nothing more is admitted"; the other accountings refused)."""

from __future__ import annotations

import mpmath as mp
import pytest
from fastapi.testclient import TestClient

from app.accounting.filters import FilterKind, spend, spend_delta
from app.accounting.mechanisms import mechanism_from_dict
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


# FORMULAS 3.2: "Pure-DP totals: C4 10, C5 25, C6 20, C7 20 (delta = 0)"
PURE_TOTALS = [
    ([{"mechanism": "laplace", "epsilon": 0.1, "count": 100}], 10.0),
    ([{"mechanism": "randomized_response", "epsilon": 0.5, "k": 2, "count": 50}], 25.0),
    ([{"mechanism": "randomized_response", "epsilon": 1.0, "k": 4, "count": 20}], 20.0),
    ([{"mechanism": "rappor", "epsilon": 2.0, "count": 10}], 20.0),
]


@pytest.mark.parametrize(("mechanisms", "total"), PURE_TOTALS)
@pytest.mark.parametrize("accounting", ["rdp", "zcdp", "pld"])
def test_compose_at_delta_zero_is_the_pure_dp_sum(
    client: TestClient, mechanisms: list, total: float, accounting: str
) -> None:
    r = client.post(
        "/v1/accounting/compose",
        json={"mechanisms": mechanisms, "delta": 0, "accounting": accounting},
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["method"] == "pure_dp" and body["delta"] == 0.0
    assert total <= body["epsilon"] <= total * (1 + 1e-12)


def test_delta_zero_without_a_pure_bound_is_a_clear_422(client: TestClient) -> None:
    for mechanisms in (
        [{"mechanism": "gaussian", "sigma": 3.0}],
        [{"mechanism": "approx_dp", "epsilon": 0.5, "delta": 1e-8}],
    ):
        r = client.post("/v1/accounting/compose", json={"mechanisms": mechanisms, "delta": 0})
        assert r.status_code == 422 and "delta 0" in r.json()["detail"], r.text
    # between 0 and the smallest delta: still refused, naming the floor
    lap = [{"mechanism": "laplace", "epsilon": 0.1}]
    r = client.post("/v1/accounting/compose", json={"mechanisms": lap, "delta": 1e-310})
    assert r.status_code == 422, r.text


@pytest.mark.parametrize("adaptive", [True, False])
def test_spend_at_delta_zero_is_the_pure_dp_sum(client: TestClient, adaptive: bool) -> None:
    ds = new_dataset(client, budget={"epsilon": 5.0, "delta": 1e-6}, adaptive=adaptive)
    url = f"/v1/datasets/{ds['id']}"
    lap = {"mechanism": {"mechanism": "laplace", "epsilon": 0.1, "count": 5}}
    assert client.post(f"{url}/charges", json=lap).status_code == 201
    r = client.get(f"{url}/spend", params={"delta": 0})
    assert r.status_code == 200, r.text
    assert r.json()["method"] == "pure_dp" and 0.5 <= r.json()["epsilon"] <= 0.5 * (1 + 1e-12)
    gauss = {"mechanism": {"mechanism": "gaussian", "sigma": 50.0}}
    assert client.post(f"{url}/charges", json=gauss).status_code == 201
    r = client.get(f"{url}/spend", params={"delta": 0})
    assert r.status_code == 200 and r.json()["epsilon"] is None, r.text
    r = client.get(f"{url}/spend", params={"delta": 1e-310})
    assert r.status_code == 422, r.text


@pytest.mark.parametrize("accounting", ["rdp", "zcdp", "pld"])
def test_a_tiny_epsilon_approx_dp_is_answered_as_the_core_computes_it(
    client: TestClient, accounting: str
) -> None:
    """approx_dp with epsilon 1e-200 and no delta of its own: the delta at epsilon 0 was
    reported as exactly 0 (its rho and RDP curve underflowed) where the worst 1e-200-DP mechanism
    has tanh(1e-200 / 2) = 5e-201; the route reports the core's value, bit for bit."""
    mechanism = {"mechanism": "approx_dp", "epsilon": 1e-200, "delta": 0.0}
    ds = new_dataset(
        client, budget={"epsilon": 1.0, "delta": 1e-6}, accounting=accounting, adaptive=False
    )
    url = f"/v1/datasets/{ds['id']}"
    assert client.post(f"{url}/charges", json={"mechanism": mechanism}).status_code == 201
    tv = float(mp.tanh(mp.mpf(1e-200) / 2))
    r = client.get(f"{url}/spend", params={"epsilon": 0.0})
    assert r.status_code == 200, r.text
    got = r.json()["delta"]
    assert got >= tv
    if accounting != "pld":
        kind = FilterKind.RDP if accounting == "rdp" else FilterKind.ZCDP
        curve = mechanism_from_dict(mechanism).curve()
        assert got == spend_delta(kind, curve, 0.0).delta
        r = client.get(f"{url}/spend", params={"delta": 1e-300})
        assert r.status_code == 200, r.text
        assert r.json()["epsilon"] == spend(kind, curve, 1e-300).epsilon
        # binary RR's epsilon at delta 1e-300: log(e^eps - delta (e^eps + 1)), about eps
        assert r.json()["epsilon"] >= 1e-200 - 2.1e-300


@pytest.mark.parametrize("accounting", ["rdp", "zcdp"])
def test_entry_deltas_that_leave_a_subnormal_delta_are_converted(
    client: TestClient, accounting: str
) -> None:
    """Budget delta 2^-1022 (the least accepted) and an entry of (0, 2e-308): the conversions
    ran at the 2.25e-309 left, where 1 / delta overflowed; Bun-Steinke's epsilon was
    0 * inf = NaN, so the charge was refused ("would reach nan") and compose said there was no
    finite epsilon, while the ledger is (0, 2e-308)-DP: epsilon 0."""
    least = 2.0**-1022
    mechanism = {"mechanism": "approx_dp", "epsilon": 0.0, "delta": 2e-308}
    r = client.post(
        "/v1/accounting/compose",
        json={"mechanisms": [mechanism], "delta": least, "accounting": accounting},
    )
    assert r.status_code == 200, r.text
    assert r.json()["epsilon"] == 0.0
    ds = new_dataset(
        client, budget={"epsilon": 1.0, "delta": least}, accounting=accounting, adaptive=False
    )
    r = client.post(f"/v1/datasets/{ds['id']}/charges", json={"mechanism": mechanism})
    assert r.status_code == 201, r.text
    assert r.json()["spent"]["epsilon"] == 0.0
