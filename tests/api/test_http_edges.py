"""Issue 10, item 7: HTTP edges.

* A chunked body over the limit is 413 (it was 400 "not valid JSON").
* Every 405 carries an ``Allow`` header listing exactly the methods the path takes.
* ``POST /v1/datasets/{id}/reservations`` honours ``Idempotency-Key`` as charges do.
* ``/metrics`` is open by default and needs an unscoped key when
  ``PRIVACY_LEDGER_METRICS_KEY_REQUIRED`` is set.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.config import Settings
from app.main import create_app
from tests.conftest import ADMIN, make_settings, new_dataset
from tests.snapshot import Watcher, changed_tables

LAPLACE = {"mechanism": {"mechanism": "laplace", "epsilon": 0.1}}
JSON = {"content-type": "application/json"}


def _chunks(body: bytes, size: int = 4096) -> Iterator[bytes]:
    for i in range(0, len(body), size):
        yield body[i : i + size]


def test_chunked_body_over_the_limit_is_413(client: TestClient, db_url: str) -> None:
    ds = new_dataset(client)
    limit = client.app.state.settings.max_body_bytes  # type: ignore[attr-defined]
    body = json.dumps({**LAPLACE, "label": "x" * 100, "metadata": {"pad": "y" * limit}}).encode()
    watcher = Watcher(db_url)
    try:
        before = watcher.take()
        r = client.post(f"/v1/datasets/{ds['id']}/charges", content=_chunks(body), headers=JSON)
        assert r.status_code == 413, r.text
        assert r.headers["content-type"].startswith("application/problem+json")
        problem = r.json()
        assert problem["type"].endswith("/payload-too-large") and str(limit) in problem["detail"]
        assert changed_tables(before, watcher.take()) == []
    finally:
        watcher.close()
    # a chunked body within the limit is read as usual
    small = json.dumps(LAPLACE).encode()
    r = client.post(f"/v1/datasets/{ds['id']}/charges", content=_chunks(small, 7), headers=JSON)
    assert r.status_code == 201, r.text


def _concrete(path: str) -> str:
    return (
        path.replace("{dataset_id}", "ds_0000000000000000")
        .replace("{reservation_id}", "rsv_0000000000000000")
        .replace("{key_id}", "key_0000000000000000")
    )


def test_every_405_lists_exactly_the_allowed_methods(sqlite_client: TestClient) -> None:
    paths = sqlite_client.get("/openapi.json").json()["paths"]
    checked = 0
    for path, operations in paths.items():
        allowed = {m.upper() for m in operations}
        for method in ("GET", "POST", "PUT", "PATCH", "DELETE"):
            if method in allowed:
                continue
            r = sqlite_client.request(method, _concrete(path))
            assert r.status_code == 405, (method, path, r.status_code)
            listed = [m.strip() for m in r.headers.get("allow", "").split(",") if m.strip()]
            assert set(listed) == allowed, (method, path, r.headers.get("allow"))
            checked += 1
    assert checked > 50
    # static files: GET and HEAD
    r = sqlite_client.post("/static/app.js")
    assert r.status_code == 405 and {m.strip() for m in r.headers["allow"].split(",")} == {
        "GET",
        "HEAD",
    }


# --- reservations and Idempotency-Key ---------------------------------------------------------


def _reserve(client: TestClient, ds: dict, body: dict[str, Any], key: str) -> Any:
    return client.post(
        f"/v1/datasets/{ds['id']}/reservations", json=body, headers={"Idempotency-Key": key}
    )


def _holds(client: TestClient, ds: dict) -> int:
    reserved = client.get(f"/v1/datasets/{ds['id']}/budget").json()["reserved"]
    return 0 if reserved is None else int(reserved["count"])


def test_retried_reservation_holds_once_and_answers_the_same(client: TestClient) -> None:
    ds = new_dataset(client)
    first = _reserve(client, ds, LAPLACE, "plan-1")
    again = _reserve(client, ds, LAPLACE, "plan-1")
    assert first.status_code == again.status_code == 201
    assert first.json() == again.json()
    assert _holds(client, ds) == 1
    assert _reserve(client, ds, LAPLACE, "plan-2").status_code == 201  # another key: another hold
    assert _holds(client, ds) == 2


def test_same_key_with_another_body_is_422(client: TestClient) -> None:
    ds = new_dataset(client)
    assert _reserve(client, ds, LAPLACE, "k").status_code == 201
    for other in (
        {"mechanism": {"mechanism": "laplace", "epsilon": 0.2}},
        {**LAPLACE, "ttl_seconds": 60},
        {**LAPLACE, "label": "other"},
    ):
        r = _reserve(client, ds, other, "k")
        assert r.status_code == 422 and "Idempotency-Key" in r.json()["detail"]
    assert _holds(client, ds) == 1


def test_a_key_names_one_request_across_charges_and_reservations(client: TestClient) -> None:
    ds = new_dataset(client)
    charged = client.post(
        f"/v1/datasets/{ds['id']}/charges", json=LAPLACE, headers={"Idempotency-Key": "once"}
    )
    assert charged.status_code == 201
    assert _reserve(client, ds, LAPLACE, "once").status_code == 422
    assert _reserve(client, ds, LAPLACE, "twice").status_code == 201
    again = client.post(
        f"/v1/datasets/{ds['id']}/charges", json=LAPLACE, headers={"Idempotency-Key": "twice"}
    )
    assert again.status_code == 422
    assert _holds(client, ds) == 1
    assert client.get(f"/v1/datasets/{ds['id']}/budget").json()["entries"] == 1


def test_refused_reservation_is_replayed_and_recorded_once(client: TestClient) -> None:
    ds = new_dataset(client)
    big = {"mechanism": {"mechanism": "laplace", "epsilon": 50.0}}
    a, b = _reserve(client, ds, big, "big"), _reserve(client, ds, big, "big")
    assert a.status_code == b.status_code == 409
    assert a.json() == b.json()
    rejections = client.get("/v1/rejections", params={"dataset": ds["id"]}).json()["rejections"]
    assert [r["operation"] for r in rejections] == ["reservation"]


def test_concurrent_retries_hold_once(client: TestClient) -> None:
    ds = new_dataset(client)
    n = 8
    barrier = threading.Barrier(n)

    def one(_: int) -> tuple[int, dict]:
        barrier.wait()
        r = _reserve(client, ds, LAPLACE, "same")
        return r.status_code, r.json()

    with ThreadPoolExecutor(n) as pool:
        answers = list(pool.map(one, range(n)))
    assert {code for code, _ in answers} == {201}
    assert len({body["id"] for _, body in answers}) == 1
    assert _holds(client, ds) == 1


# --- /metrics ----------------------------------------------------------------------------------


def test_metrics_are_open_by_default(client: TestClient) -> None:
    r = client.get("/metrics", headers={"Authorization": ""})
    assert r.status_code == 200 and "privacy_ledger" in r.text


def test_metrics_can_require_an_unscoped_key(db_url: str) -> None:
    app = create_app(make_settings(db_url, metrics_key_required=True))
    with TestClient(app) as c:
        ds = _create_dataset(c)
        viewer = c.post("/v1/keys", json={"role": "viewer"}, headers=ADMIN).json()["key"]
        scoped = c.post(
            "/v1/keys", json={"role": "admin", "datasets": [ds["id"]]}, headers=ADMIN
        ).json()["key"]
        assert c.get("/metrics").status_code == 401
        assert c.get("/metrics", headers={"Authorization": "Bearer pl_v_nope"}).status_code == 401
        assert c.get("/metrics", headers={"Authorization": f"Basic {viewer}"}).status_code == 401
        r = c.get("/metrics", headers={"Authorization": f"Bearer {scoped}"})
        assert r.status_code == 403 and "unscoped" in r.json()["detail"]
        ok = c.get("/metrics", headers={"Authorization": f"Bearer {viewer}"})
        assert ok.status_code == 200 and "privacy_ledger" in ok.text


def _create_dataset(c: TestClient) -> dict[str, Any]:
    r = c.post(
        "/v1/datasets", json={"name": "m", "budget": {"epsilon": 1, "delta": 1e-6}}, headers=ADMIN
    )
    assert r.status_code == 201, r.text
    return dict(r.json())


@pytest.mark.parametrize("value", ["true", "1"])
def test_metrics_setting_from_the_environment(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("PRIVACY_LEDGER_METRICS_KEY_REQUIRED", value)
    assert Settings().metrics_key_required is True
