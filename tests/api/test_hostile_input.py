"""Invariant 4: bad input gets a clear 4xx and changes nothing; no input yields a 5xx."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from tests.conftest import new_dataset

JSON = {"content-type": "application/json"}


def _mech(fields: str) -> str:
    return '{"mechanism": {"mechanism": "gaussian", %s}}' % fields  # noqa: UP031 - raw JSON text


BAD_CHARGE_BODIES = {
    "nan": _mech('"sigma": NaN'),
    "inf": _mech('"sigma": Infinity'),
    "minus_inf": _mech('"sigma": -Infinity'),
    "overflow_literal": _mech('"sigma": 1e400'),
    "zero": _mech('"sigma": 0'),
    "negative": _mech('"sigma": -1'),
    "huge": _mech('"sigma": 1e308'),
    "subnormal": _mech('"sigma": 1e-320'),
    "string": _mech('"sigma": "2.0"'),
    "word": _mech('"sigma": "lots"'),
    "boolean": _mech('"sigma": true'),
    "null": _mech('"sigma": null'),
    "list": _mech('"sigma": [1]'),
    "huge_count": _mech('"sigma": 2, "count": 1000000000000'),
    "huger_count": _mech('"sigma": 2, "count": 1180591620717411303424'),
    "float_count": _mech('"sigma": 2, "count": 2.5'),
    "zero_count": _mech('"sigma": 2, "count": 0'),
    "unknown_field": _mech('"sigma": 2, "sigmaa": 3'),
    "sensitivity_ratio": _mech('"sigma": 1e-6, "sensitivity": 1e12'),
    "unknown_mechanism": '{"mechanism": {"mechanism": "sparse_vector", "epsilon": 1}}',
    "missing_kind": '{"mechanism": {"sigma": 2}}',
    "mechanism_not_object": '{"mechanism": "gaussian"}',
    "laplace_both_forms": '{"mechanism": {"mechanism": "laplace", "epsilon": 1, "scale": 1}}',
    "laplace_neither": '{"mechanism": {"mechanism": "laplace"}}',
    "rr_k_one": '{"mechanism": {"mechanism": "randomized_response", "epsilon": 1, "k": 1}}',
    "rr_eps_huge": '{"mechanism": {"mechanism": "randomized_response", "epsilon": 1e5}}',
    "sample_rate_above_one": '{"mechanism": {"mechanism": "subsampled_gaussian", "sigma": 1, "sample_rate": 1.5}}',
    "sample_rate_zero": '{"mechanism": {"mechanism": "subsampled_gaussian", "sigma": 1, "sample_rate": 0}}',
    "steps_float": '{"mechanism": {"mechanism": "subsampled_gaussian", "sigma": 1, "sample_rate": 0.1, "steps": 1.5}}',
    "dlap_fractional_sensitivity": '{"mechanism": {"mechanism": "discrete_laplace", "epsilon": 1, "sensitivity": 1.5}}',
    "label_too_long": '{"mechanism": {"mechanism": "gaussian", "sigma": 2}, "label": "%s"}'
    % ("x" * 5000),  # noqa: UP031
    "metadata_not_object": '{"mechanism": {"mechanism": "gaussian", "sigma": 2}, "metadata": [1, 2]}',
    "metadata_nan": '{"mechanism": {"mechanism": "gaussian", "sigma": 2}, "metadata": {"x": NaN}}',
    "metadata_deep": '{"mechanism": {"mechanism": "gaussian", "sigma": 2}, "metadata": %s}'
    % ('{"a": ' * 40 + "1" + "}" * 40),
    "metadata_big": '{"mechanism": {"mechanism": "gaussian", "sigma": 2}, "metadata": {"x": "%s"}}'
    % ("y" * 40_000),
    # nested past the recursion the depth check could take (about 478 levels), below what the
    # JSON parser refuses (about 990): an outside audit got 500s here
    "metadata_deep_500": '{"mechanism": {"mechanism": "gaussian", "sigma": 2}, "metadata": %s}'
    % ('{"a": ' * 500 + "1" + "}" * 500),
    "metadata_deep_list_980": '{"mechanism": {"mechanism": "gaussian", "sigma": 2}, '
    '"metadata": {"a": %s}}' % ("[" * 980 + "]" * 980),
    "deep_json": "[" * 10_000 + "]" * 10_000,
    "deep_object": '{"a":' * 5000 + "1" + "}" * 5000,
    "empty": "",
    "not_json": "sigma=2",
    "truncated": '{"mechanism": {"mechanism": "gaussian", "sigma": 2',
    "top_level_list": "[1, 2, 3]",
    "top_level_number": "3",
    "extra_top_field": '{"mechanism": {"mechanism": "gaussian", "sigma": 2}, "bogus": 1}',
    "big_body": '{"mechanism": {"mechanism": "gaussian", "sigma": 2}, "label": "%s"}'
    % ("z" * 2_000_000),  # noqa: UP031
}


def _assert_nothing_recorded(client: TestClient, ds_id: str) -> None:
    budget = client.get(f"/v1/datasets/{ds_id}/budget").json()
    assert budget["entries"] == 0
    assert budget["spent"]["epsilon"] == 0.0
    assert client.get("/v1/rejections", params={"dataset": ds_id}).json()["rejections"] == []


@pytest.fixture
def ds(client: TestClient) -> dict:
    return new_dataset(client)


@pytest.mark.parametrize("name", sorted(BAD_CHARGE_BODIES))
def test_bad_charge_bodies_are_4xx_with_detail(client: TestClient, ds: dict, name: str) -> None:
    r = client.post(
        f"/v1/datasets/{ds['id']}/charges", content=BAD_CHARGE_BODIES[name], headers=JSON
    )
    assert 400 <= r.status_code < 500, (r.status_code, r.text[:300])
    assert r.headers["content-type"].startswith("application/problem+json")
    body = r.json()
    assert body["status"] == r.status_code and body["detail"]
    _assert_nothing_recorded(client, ds["id"])


def test_wrong_content_type_is_4xx(client: TestClient, ds: dict) -> None:
    body = json.dumps({"mechanism": {"mechanism": "gaussian", "sigma": 2}})
    r = client.post(
        f"/v1/datasets/{ds['id']}/charges", content=body, headers={"content-type": "text/plain"}
    )
    assert 400 <= r.status_code < 500
    _assert_nothing_recorded(client, ds["id"])


@pytest.mark.parametrize(
    "budget",
    [
        {"epsilon": 0, "delta": 1e-5},
        {"epsilon": -1, "delta": 1e-5},
        {"epsilon": 1, "delta": 0},
        {"epsilon": 1, "delta": 1},
        {"epsilon": 1, "delta": 2},
        {"epsilon": "1", "delta": 1e-5},
        {"epsilon": 1},
        {"epsilon": 1e400, "delta": 1e-5},
    ],
)
def test_bad_budgets_are_422(client: TestClient, budget: dict) -> None:
    r = client.post(
        "/v1/datasets", content=json.dumps({"name": "x", "budget": budget}), headers=JSON
    )
    assert r.status_code == 422 and r.json()["detail"]
    assert client.get("/v1/datasets").json()["datasets"] == []


@pytest.mark.parametrize(
    "query",
    [
        "delta=-0.1",
        "delta=1e-310",
        "delta=1",
        "delta=nan",
        "delta=inf",
        "delta=abc",
        "epsilon=-1",
        "epsilon=inf",
        "",
        "delta=0.1&epsilon=1",
    ],
)
def test_bad_spend_queries_are_422(client: TestClient, ds: dict, query: str) -> None:
    r = client.get(f"/v1/datasets/{ds['id']}/spend?{query}")
    assert r.status_code == 422, r.text


@pytest.mark.parametrize(
    "query",
    [
        "mechanism=bogus",
        "mechanism=gaussian&sensitivity=-1",
        "mechanism=gaussian&sensitivity=nan",
        "mechanism=gaussian&parameter=epsilon",
        "mechanism=subsampled_gaussian",
        "mechanism=laplace&k=3",
        "mechanism=gaussian&sensitivity=1e300",
    ],
)
def test_bad_calibrate_queries_are_4xx(client: TestClient, ds: dict, query: str) -> None:
    r = client.get(f"/v1/datasets/{ds['id']}/calibrate?{query}")
    assert 400 <= r.status_code < 500, r.text


@pytest.mark.parametrize(
    "path",
    [
        "/v1/datasets/does-not-exist",
        "/v1/datasets/does-not-exist/budget",
        "/v1/datasets/does-not-exist/ledger",
        "/v1/reservations/rsv_missing",
        "/v1/no-such-endpoint",
    ],
)
def test_unknown_resources_are_404_problems(client: TestClient, path: str) -> None:
    r = client.get(path)
    assert r.status_code == 404
    assert r.headers["content-type"].startswith("application/problem+json")


def test_invalid_cursor_and_page_size(client: TestClient, ds: dict) -> None:
    assert client.get(f"/v1/datasets/{ds['id']}/ledger", params={"cursor": "!!"}).status_code == 422
    assert client.get(f"/v1/datasets/{ds['id']}/ledger", params={"limit": 0}).status_code == 422
    assert client.get(f"/v1/datasets/{ds['id']}/ledger", params={"limit": 10**6}).status_code == 422


def test_compose_rejects_bad_input(client: TestClient) -> None:
    for body in [
        '{"mechanisms": [], "delta": 1e-5}',
        '{"mechanisms": [{"mechanism": "gaussian", "sigma": 1}], "delta": 0}',
        '{"mechanisms": [{"mechanism": "gaussian", "sigma": 1}], "delta": 1e-5, "accounting": "gdp"}',
        '{"mechanisms": [{"mechanism": "gaussian", "sigma": NaN}], "delta": 1e-5}',
    ]:
        r = client.post("/v1/accounting/compose", content=body, headers=JSON)
        assert r.status_code == 422, body


@pytest.mark.parametrize("depth", [40, 300, 440])
def test_deeply_nested_dp_events_and_reservation_metadata_are_422(
    client: TestClient, ds: dict, depth: int
) -> None:
    """A dp_event or a reservation's metadata nested hundreds of levels deep (each composed
    event is two levels: an object and its list; up to 880 here, below the parser's limit): a
    422 naming the depth limit, not a 500 from the recursion of the depth check (an outside
    audit)."""
    gaussian = '{"type": "GaussianDpEvent", "noise_multiplier": 5}'
    event = '{"type": "ComposedDpEvent", "events": [' * depth + gaussian + "]}" * depth
    url = f"/v1/datasets/{ds['id']}"
    r = client.post(f"{url}/charges/dp_event", content='{"dp_event": ' + event + "}", headers=JSON)
    assert r.status_code == 422, (r.status_code, r.text[:300])
    assert "levels deep; the limit is" in r.json()["detail"], r.text[:300]
    meta = '{"a": ' * (2 * depth) + "1" + "}" * (2 * depth)  # as deep as the event
    body = '{"mechanism": {"mechanism": "gaussian", "sigma": 2}, "metadata": ' + meta + "}"
    r = client.post(f"{url}/reservations", content=body, headers=JSON)
    assert r.status_code == 422, (r.status_code, r.text[:300])
    assert "levels deep; the limit is" in r.json()["detail"], r.text[:300]
    _assert_nothing_recorded(client, ds["id"])
