"""Issue 10, item 4: numbers no database or conversion can take are 422, never 500.

Cursors and ``before_id`` beyond a signed 64-bit integer, offsets beyond it, and budget deltas
below ``MIN_BUDGET_DELTA`` (whose conversions overflow) are refused naming the limit; at the
limit itself every filter kind takes every mechanism.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from app.accounting.filters import MIN_BUDGET_DELTA
from tests.conftest import new_dataset
from tests.snapshot import Watcher, changed_tables

BIG = [2**63, 2**64, 2**70, 10**30]
MAX = 2**63 - 1


def _cursor(raw: str) -> str:
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


@pytest.fixture
def ds(client: TestClient) -> dict[str, Any]:
    d = new_dataset(client, budget={"epsilon": 1.0, "delta": 1e-6})
    url = f"/v1/datasets/{d['id']}/charges"
    big = {"mechanism": {"mechanism": "laplace", "epsilon": 50.0}}
    assert (
        client.post(url, json={"mechanism": {"mechanism": "laplace", "epsilon": 0.1}}).status_code
        == 201
    )
    assert client.post(url, json=big).status_code == 409
    return d


@pytest.mark.parametrize("n", BIG)
def test_cursors_beyond_64_bits_are_422(client: TestClient, ds: dict, n: int) -> None:
    for path in (
        f"/v1/datasets/{ds['id']}/ledger",
        f"/v1/datasets/{ds['id']}/rejections",
        "/v1/rejections",
    ):
        r = client.get(path, params={"cursor": _cursor(f"v1:{n}")})
        assert r.status_code == 422 and "cursor" in r.json()["detail"], (path, r.text)


@pytest.mark.parametrize(
    "raw", ["v1:0", "v1:-1", "v1:+5", "v1: 5", "v1:\u0661\u0662", "v1:1_000", "v2:5"]
)
def test_cursors_not_made_by_the_server_are_422(client: TestClient, ds: dict, raw: str) -> None:
    r = client.get(f"/v1/datasets/{ds['id']}/ledger", params={"cursor": _cursor(raw)})
    assert r.status_code == 422, r.text


def test_the_largest_cursor_is_a_valid_position(client: TestClient, ds: dict) -> None:
    r = client.get(f"/v1/datasets/{ds['id']}/ledger", params={"cursor": _cursor(f"v1:{MAX}")})
    assert r.status_code == 200 and len(r.json()["entries"]) == 1
    assert client.get("/v1/rejections", params={"cursor": _cursor(f"v1:{MAX}")}).status_code == 200
    assert client.get("/v1/audit", params={"before_id": MAX}).status_code == 200
    assert client.get("/v1/datasets", params={"offset": MAX}).json()["datasets"] == []


@pytest.mark.parametrize("n", BIG)
def test_before_id_and_offset_beyond_64_bits_are_422(client: TestClient, n: int) -> None:
    r = client.get("/v1/audit", params={"before_id": n})
    assert r.status_code == 422 and "before_id" in r.json()["detail"]
    r = client.get("/v1/datasets", params={"offset": n})
    assert r.status_code == 422 and "offset" in r.json()["detail"]


SETTINGS = {
    "rdp": {"accounting": "rdp", "adaptive": False},
    "rdp_fixed_orders": {"accounting": "rdp", "adaptive": True},
    "pld": {"accounting": "pld", "adaptive": False},
    "zcdp": {"accounting": "zcdp", "adaptive": False},
    "zcdp_filter": {"accounting": "zcdp", "adaptive": True},
    "gdp": {"accounting": "rdp", "allowed_mechanisms": ["gaussian"]},
}
MECHANISMS = [
    {"mechanism": "gaussian", "sigma": 50.0},
    {"mechanism": "laplace", "epsilon": 0.001},
    {"mechanism": "randomized_response", "epsilon": 0.001, "k": 3},
    {"mechanism": "rappor", "epsilon": 0.001},
    {"mechanism": "subsampled_gaussian", "sigma": 5.0, "sample_rate": 0.001, "steps": 10},
    {"mechanism": "discrete_laplace", "epsilon": 0.001},
]


@pytest.mark.parametrize("filter_", sorted(SETTINGS))
def test_every_filter_takes_every_mechanism_at_the_smallest_delta(
    client: TestClient, filter_: str
) -> None:
    d = new_dataset(
        client,
        f"min-{filter_}",
        budget={"epsilon": 10.0, "delta": MIN_BUDGET_DELTA},
        **SETTINGS[filter_],
    )
    assert d["filter"] == filter_
    assert d["spent"]["epsilon"] == 0.0 and d["budget"]["delta"] == MIN_BUDGET_DELTA
    for m in MECHANISMS:
        if filter_ == "gdp" and m["mechanism"] != "gaussian":
            continue
        r = client.post(f"/v1/datasets/{d['id']}/charges", json={"mechanism": m})
        assert r.status_code in (201, 409), (m, r.text)
        if r.status_code == 201:
            spent = r.json()["spent"]["epsilon"]
            assert spent is not None and 0 < spent <= 10.0
    budget = client.get(f"/v1/datasets/{d['id']}/budget").json()
    assert budget["spent"]["epsilon"] is not None
    at = client.get(f"/v1/datasets/{d['id']}/spend", params={"delta": MIN_BUDGET_DELTA})
    assert at.status_code == 200 and at.json()["epsilon"] == budget["spent"]["epsilon"]
    assert client.get(
        f"/v1/datasets/{d['id']}/calibrate", params={"mechanism": "gaussian"}
    ).status_code in (200, 409)


@pytest.mark.parametrize("delta", [5e-324, 1e-310, float(np.nextafter(MIN_BUDGET_DELTA, 0))])
def test_smaller_deltas_are_422_naming_the_minimum(
    client: TestClient, db_url: str, delta: float
) -> None:
    d = new_dataset(client, "kept")
    watcher = Watcher(db_url)
    try:
        before = watcher.take()
        for accounting in ("rdp", "zcdp"):
            body = {
                "name": f"tiny-{accounting}",
                "budget": {"epsilon": 1.0, "delta": delta},
                "accounting": accounting,
            }
            r = client.post(
                "/v1/datasets",
                content=json.dumps(body),
                headers={"content-type": "application/json"},
            )
            assert r.status_code == 422 and repr(MIN_BUDGET_DELTA) in r.json()["detail"], r.text
        r = client.patch(f"/v1/datasets/{d['id']}", json={"budget": {"delta": delta}})
        assert r.status_code == 422 and repr(MIN_BUDGET_DELTA) in r.json()["detail"]
        r = client.post(
            "/v1/accounting/compose",
            json={"mechanisms": [{"mechanism": "gaussian", "sigma": 1.0}], "delta": delta},
        )
        assert r.status_code == 422 and repr(MIN_BUDGET_DELTA) in r.json()["detail"]
        # the spend at a delta: it was a 422 saying "epsilon must be finite and >= 0, got inf"
        # (the conversion's own failure) for the delta /spend?epsilon= itself had answered
        r = client.get(f"/v1/datasets/{d['id']}/spend", params={"delta": delta})
        assert r.status_code == 422 and repr(MIN_BUDGET_DELTA) in r.json()["detail"], r.text
        assert changed_tables(before, watcher.take()) == []
    finally:
        watcher.close()


@pytest.mark.parametrize("rate", [5e-324, 1e-310])
def test_subnormal_sample_rates_are_422(client: TestClient, ds: dict, rate: float) -> None:
    """A subnormal sample rate overflowed 1/q in the subsampled-Gaussian series: 13 s of CPU
    per request (counted here as: refused before any curve is computed)."""
    mech = {"mechanism": "subsampled_gaussian", "sigma": 1.0, "sample_rate": rate, "steps": 10}
    for path, body in (
        (f"/v1/datasets/{ds['id']}/charges", {"mechanism": mech}),
        ("/v1/accounting/compose", {"mechanisms": [mech], "delta": 1e-6}),
    ):
        r = client.post(
            path, content=json.dumps(body), headers={"content-type": "application/json"}
        )
        assert r.status_code == 422 and "2.2250738585072014e-308" in r.json()["detail"], r.text
    r = client.get(
        f"/v1/datasets/{ds['id']}/calibrate",
        params={"mechanism": "subsampled_gaussian", "sample_rate": repr(rate), "steps": 10},
    )
    assert r.status_code == 422 and "sample_rate" in r.json()["detail"]
    ok = client.get(
        f"/v1/datasets/{ds['id']}/calibrate",
        params={"mechanism": "subsampled_gaussian", "sample_rate": 0.01, "steps": 10},
    )
    assert ok.status_code in (200, 409), ok.text
