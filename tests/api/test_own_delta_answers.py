"""What a dataset answers beside entries that carry their own delta (approx_dp, approximate
zcdp / rdp): the rho it says is left must be admitted, and a refusal must name what refused it.

Found by an outside check: a non-adaptive zcdp dataset with an approximate zCDP entry reported
``remaining.rho`` from the bound for the whole budget delta (0.0144 left, and a charge of it
refused, where 0.0102 fits at what the entry's delta leaves); refusals by the entries' deltas
alone said "rho would reach 1e-4, above the bound 0.024" or "epsilon would reach 0.02, above
the budget 1"."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient

from tests.conftest import new_dataset


def _zcdp(rho: float, delta: float = 0.0) -> dict:
    return {"mechanism": {"mechanism": "zcdp", "rho": rho, "delta": delta}}


def test_the_rho_left_beside_own_deltas_is_what_admission_takes(client: TestClient) -> None:
    ds = new_dataset(
        client, budget={"epsilon": 1.0, "delta": 1e-6}, accounting="zcdp", adaptive=False
    )
    url = f"/v1/datasets/{ds['id']}"
    assert client.post(f"{url}/charges", json=_zcdp(0.01, 9e-7)).status_code == 201
    left = client.get(f"{url}/budget").json()["remaining"]["rho"]
    assert left > 0
    dry = {"dry_run": "true"}
    # what is said to be left is admitted, and a little more is not
    r = client.post(f"{url}/charges", params=dry, json=_zcdp(left * (1 - 1e-9)))
    assert r.status_code == 200, r.text
    r = client.post(f"{url}/charges", params=dry, json=_zcdp(left * (1 + 1e-6)))
    assert r.status_code == 409, r.text
    # the calibration (a search on admission itself) finds the same rho
    cal = client.get(f"{url}/calibrate", params={"mechanism": "zcdp"})
    assert cal.status_code == 200, cal.text
    assert cal.json()["value"] == pytest.approx(left, rel=1e-6)


_COMPARISON = re.compile(
    r"would reach ([0-9.e+-]+|inf)\b.*above the .*?(?:bound|budget) ([0-9.e+-]+)"
)


@pytest.mark.parametrize("accounting", ["rdp", "zcdp", "pld"])
def test_a_refusal_by_the_entries_own_deltas_says_so(client: TestClient, accounting: str) -> None:
    ds = new_dataset(
        client, budget={"epsilon": 1.0, "delta": 1e-6}, accounting=accounting, adaptive=False
    )
    url = f"/v1/datasets/{ds['id']}"
    half = {"mechanism": {"mechanism": "approx_dp", "epsilon": 0.01, "delta": 5e-7}}
    assert client.post(f"{url}/charges", json=half).status_code == 201
    hold = {**half, "ttl_seconds": 600}
    for path, body in (("charges", half), ("reservations", hold)):
        r = client.post(f"{url}/{path}", json=body)
        assert r.status_code == 409, r.text
        detail = r.json()["detail"]
        assert "own deltas" in detail and "1e-06" in detail, detail
        # whatever figure it quotes as compared, it is really above what it is compared with
        for reached, limit in _COMPARISON.findall(detail):
            assert float(reached) > float(limit), detail
    # an approximate entry that fits, then a refusal by epsilon at what the deltas leave: the
    # comparison it states holds (rho filters compared rho with the whole-delta bound)
    four = {"mechanism": {**half["mechanism"], "delta": 4e-7}}
    assert client.post(f"{url}/charges", json=four).status_code == 201
    # rho 0.022 is below the zcdp bound for the whole delta (0.0244) and above the one at the
    # 1e-7 the deltas leave (0.0202); pld takes no zcdp entry, a Gaussian there
    gaussian = {"mechanism": {"mechanism": "gaussian", "sigma": 2.0}}
    big = _zcdp(0.022) if accounting != "pld" else gaussian
    r = client.post(f"{url}/charges", json=big)
    assert r.status_code == 409, r.text
    detail = r.json()["detail"]
    found = _COMPARISON.findall(detail)
    assert found, detail
    for reached, limit in found:
        assert float(reached) > float(limit), detail


def test_deltas_past_the_budget_delta_read_as_past_it(client: TestClient) -> None:
    """Deltas of 0.2 and then 0.1 + 2^-54-ish more, against a budget delta of 0.3: the sum is
    above it by a few ulps, and the refusal prints the two so that they read as different
    (it said "add up to 0.3, reaching the budget delta 0.3"; found by the generic-kinds audit)."""
    budget_delta = 0.3
    ds = new_dataset(
        client, budget={"epsilon": 50.0, "delta": budget_delta}, accounting="rdp", adaptive=False
    )
    url = f"/v1/datasets/{ds['id']}"
    first = {"mechanism": {"mechanism": "approx_dp", "epsilon": 0.01, "delta": 0.2}}
    assert client.post(f"{url}/charges", json=first).status_code == 201
    second = {"mechanism": {"mechanism": "approx_dp", "epsilon": 0.01, "delta": 0.1}}
    r = client.post(f"{url}/charges", json=second)
    assert r.status_code == 409, r.text
    detail = r.json()["detail"]
    m = re.search(r"add up to ([0-9.e+-]+).*budget delta ([0-9.e+-]+)", detail)
    assert m, detail
    total, limit = float(m.group(1)), float(m.group(2))
    assert limit == budget_delta
    assert total >= 0.2 + 0.1 >= limit  # the float sum, rounded up, reaches the budget
    assert (total > limit) == (m.group(1) != m.group(2)), detail
