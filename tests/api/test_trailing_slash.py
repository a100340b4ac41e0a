"""API paths with a trailing slash are the same routes (a black-box check of DESIGN got a 307
redirect with no body for ``GET /v1/datasets/``, which httpx does not follow by default)."""

from __future__ import annotations

from fastapi.testclient import TestClient

from tests.conftest import new_dataset


def test_a_trailing_slash_reaches_the_same_route(client: TestClient) -> None:
    r = client.post(
        "/v1/datasets/",
        json={"name": "slash", "budget": {"epsilon": 1.0, "delta": 1e-6}},
        follow_redirects=False,
    )
    assert r.status_code == 201, r.text
    ds = r.json()
    plain = new_dataset(client, "plain")
    listed = client.get("/v1/datasets/", follow_redirects=False)
    assert listed.status_code == 200
    assert {d["id"] for d in listed.json()["datasets"]} >= {ds["id"], plain["id"]}
    for path in (f"/v1/datasets/{ds['id']}/", f"/v1/datasets/{ds['id']}/budget/"):
        r = client.get(path, follow_redirects=False)
        assert r.status_code == 200, (path, r.status_code, r.text)
        assert r.json() == client.get(path.rstrip("/")).json()
    charge = {"mechanism": {"mechanism": "laplace", "epsilon": 0.1}}
    r = client.post(f"/v1/datasets/{ds['id']}/charges/", json=charge, follow_redirects=False)
    assert r.status_code == 201, r.text
    # unknown paths stay 404 problems, and the dashboard's root is untouched
    assert client.get("/v1/nothing-here/", follow_redirects=False).status_code == 404
    assert client.get("/", follow_redirects=False).status_code == 200


def test_service_paths_take_a_trailing_slash(client: TestClient) -> None:
    """``/healthz/``, ``/readyz/`` and ``/metrics/`` answered 307 redirects (an outside audit)
    while every ``/v1/`` path answered directly."""
    for path in ("/healthz", "/readyz", "/metrics"):
        plain = client.get(path, follow_redirects=False)
        slashed = client.get(path + "/", follow_redirects=False)
        assert plain.status_code == 200, (path, plain.status_code)
        assert slashed.status_code == 200, (path, slashed.status_code, slashed.text)
        assert slashed.headers["content-type"] == plain.headers["content-type"]
    assert client.get("/healthz/", follow_redirects=False).json() == client.get("/healthz").json()
    assert client.get("/healthzz/", follow_redirects=False).status_code == 404
