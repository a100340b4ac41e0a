"""The direct path (``app.api.direct``) answers exactly what FastAPI's own path answers.

Two apps on two copies of one database (the same datasets and keys): one with the direct path,
one without. The same requests, valid and not, go to both in the same order; every answer must
be the same status and the same body (entry ids and times, drawn afresh by each, aside), and
the valid ones must have taken the direct path in the one app and not in the other.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.api import direct
from app.api.routes import datasets
from app.api.safe_text import reject_unsafe_parameters
from app.main import ROUTERS, create_app
from tests.conftest import ADMIN, make_settings, new_dataset

VOLATILE = {"id", "created_at", "at", "request_id"}  # drawn afresh by each database / request


def _same_shape(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: ("<volatile>" if k in VOLATILE else _same_shape(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [_same_shape(v) for v in value]
    return value


def _body(response: Any) -> Any:
    try:
        return _same_shape(response.json())
    except json.JSONDecodeError:
        return response.content


@pytest.fixture
def pair(
    sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[TestClient, TestClient, dict[str, Any]]]:
    """(direct, stock, fixtures): two apps on copies of a database holding two datasets, a
    pipeline key, a viewer key and a key scoped to the other dataset."""
    with TestClient(create_app(make_settings(sqlite_url))) as setup:
        setup.headers.update(ADMIN)
        ds = new_dataset(setup, "direct", budget={"epsilon": 2.0, "delta": 1e-5})["id"]
        other = new_dataset(setup, "other")["id"]
        keys = {
            role: setup.post("/v1/keys", json={"label": role, "role": role}).json()["key"]
            for role in ("pipeline", "viewer")
        }
        keys["scoped"] = setup.post(
            "/v1/keys", json={"label": "scoped", "role": "pipeline", "datasets": [other]}
        ).json()["key"]
    copy = tmp_path / "copy.db"
    shutil.copy(sqlite_url.removeprefix("sqlite:///"), copy)
    served = {"direct": 0}
    arguments = direct._Plan.arguments

    async def counted(self: Any, request: Any) -> Any:
        values = await arguments(self, request)
        served["direct"] += values is not None
        return values

    monkeypatch.setattr(direct._Plan, "arguments", counted)
    with (
        TestClient(create_app(make_settings(sqlite_url))) as fast,
        TestClient(create_app(make_settings(f"sqlite:///{copy}"))) as stock,
    ):
        yield fast, stock, {"ds": ds, "other": other, "keys": keys, "served": served}


GAUSSIAN = {"mechanism": {"mechanism": "gaussian", "sigma": 3.0}}


def _requests(f: dict[str, Any]) -> list[tuple[str, dict[str, Any], bool]]:
    """(name, httpx request arguments, whether it is one the direct path serves)."""
    ds, keys = f["ds"], f["keys"]
    pipe = {"Authorization": f"Bearer {keys['pipeline']}"}
    charge = f"/v1/datasets/{ds}/charges"
    budget = f"/v1/datasets/{ds}/budget"
    post: dict[str, Any] = {"method": "POST", "url": charge}
    raw: dict[str, Any] = {**post, "headers": {**pipe, "Content-Type": "application/json"}}
    return [
        ("charge", {**post, "json": GAUSSIAN, "headers": pipe}, True),
        ("charge by admin", {**post, "json": GAUSSIAN, "headers": ADMIN}, True),
        (
            "charge with label and metadata",
            {**post, "json": {**GAUSSIAN, "label": "q1", "metadata": {"a": [1]}}, "headers": pipe},
            True,
        ),
        ("budget", {"method": "GET", "url": budget, "headers": pipe}, True),
        ("budget, viewer", {"method": "GET", "url": budget, "headers": _key(keys["viewer"])}, True),
        (
            "charge with an idempotency key",
            {**post, "json": GAUSSIAN, "headers": {**pipe, "Idempotency-Key": "k-1"}},
            True,
        ),
        (
            "the same key again (replayed)",
            {**post, "json": GAUSSIAN, "headers": {**pipe, "Idempotency-Key": "k-1"}},
            True,
        ),
        (
            "the same key, another request (422)",
            {
                **post,
                "json": {**GAUSSIAN, "label": "x"},
                "headers": {**pipe, "Idempotency-Key": "k-1"},
            },
            True,
        ),
        (
            "content type with charset",
            {
                **raw,
                "headers": {**raw["headers"], "Content-Type": "application/json; charset=utf-8"},
                "content": json.dumps(GAUSSIAN),
            },
            True,
        ),
        (
            "over budget (409)",
            {
                **post,
                "json": {"mechanism": {"mechanism": "gaussian", "sigma": 0.1}},
                "headers": pipe,
            },
            True,
        ),
        (
            "viewer may not charge (403)",
            {**post, "json": GAUSSIAN, "headers": _key(keys["viewer"])},
            True,
        ),
        (
            "key scoped elsewhere (404)",
            {**post, "json": GAUSSIAN, "headers": _key(keys["scoped"])},
            True,
        ),
        (
            "unknown key (401)",
            {**post, "json": GAUSSIAN, "headers": _key("nope-" + "x" * 40)},
            True,
        ),
        (
            "unknown dataset (404)",
            {**post, "url": "/v1/datasets/nosuch/charges", "json": GAUSSIAN, "headers": pipe},
            True,
        ),
        (
            "unknown dataset budget (404)",
            {"method": "GET", "url": "/v1/datasets/nosuch/budget", "headers": pipe},
            True,
        ),
        (
            "unknown mechanism (422)",
            {**post, "json": {"mechanism": {"mechanism": "nope"}}, "headers": pipe},
            False,
        ),
        (
            "negative sigma (422)",
            {
                **post,
                "json": {"mechanism": {"mechanism": "gaussian", "sigma": -1}},
                "headers": pipe,
            },
            False,
        ),
        ("extra field", {**post, "json": {**GAUSSIAN, "surprise": 1}, "headers": pipe}, False),
        ("no body", {**post, "headers": pipe}, False),
        ("invalid JSON", {**raw, "content": b"{not json"}, False),
        ("JSON not an object", {**raw, "content": b"[1, 2]"}, False),
        (
            "NaN in JSON",
            {**raw, "content": b'{"mechanism": {"mechanism": "gaussian", "sigma": NaN}}'},
            False,
        ),
        (
            "lone surrogate label",
            {
                **raw,
                "content": b'{"mechanism": {"mechanism": "gaussian", "sigma": 3}, "label": "\\ud800"}',
            },
            False,
        ),
        ("deeply nested JSON", {**raw, "content": b"[" * 50_000 + b"]" * 50_000}, False),
        (
            "text/plain body",
            {
                **raw,
                "headers": {**pipe, "Content-Type": "text/plain"},
                "content": json.dumps(GAUSSIAN),
            },
            False,
        ),
        ("no content type", {**raw, "headers": pipe, "content": json.dumps(GAUSSIAN)}, False),
        ("no key (401)", {**post, "json": GAUSSIAN}, False),
        (
            "basic scheme (401)",
            {**post, "json": GAUSSIAN, "headers": {"Authorization": "Basic abc"}},
            False,
        ),
        (
            "bearer without a key (401)",
            {**post, "json": GAUSSIAN, "headers": {"Authorization": "Bearer "}},
            False,
        ),
        ("budget without a key (401)", {"method": "GET", "url": budget}, False),
        (
            "dry run",
            {**post, "params": {"dry_run": "true"}, "json": GAUSSIAN, "headers": pipe},
            False,
        ),
        (
            "dry run, not a bool (422)",
            {**post, "params": {"dry_run": "maybe"}, "json": GAUSSIAN, "headers": pipe},
            False,
        ),
        (
            "unknown query parameter",
            {"method": "GET", "url": budget, "params": {"x": "1"}, "headers": pipe},
            False,
        ),
        (
            "NUL in a query parameter (422)",
            {"method": "GET", "url": budget, "params": {"x": "a\x00"}, "headers": pipe},
            False,
        ),
        (
            "NUL in the dataset (422)",
            {"method": "GET", "url": "/v1/datasets/a%00b/budget", "headers": pipe},
            False,
        ),
        (
            "idempotency key too long (422)",
            {**post, "json": GAUSSIAN, "headers": {**pipe, "Idempotency-Key": "k" * 201}},
            False,
        ),
        (
            "idempotency key not printable (422)",
            {**post, "json": GAUSSIAN, "headers": {**pipe, "Idempotency-Key": "a b\t"}},
            False,
        ),
        (
            "idempotency key twice (422)",
            {
                **post,
                "json": GAUSSIAN,
                "headers": [*pipe.items(), ("Idempotency-Key", "a"), ("Idempotency-Key", "b")],
            },
            False,
        ),
        ("charge after all that", {**post, "json": GAUSSIAN, "headers": pipe}, True),
    ]


def _key(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def test_direct_and_stock_paths_answer_the_same(
    pair: tuple[TestClient, TestClient, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    fast, stock, f = pair
    for name, request, served_direct in _requests(f):
        before = f["served"]["direct"]
        monkeypatch.setattr(direct, "ENABLED", True)
        a = fast.request(**request)
        took_direct = f["served"]["direct"] - before
        monkeypatch.setattr(direct, "ENABLED", False)
        b = stock.request(**request)
        assert f["served"]["direct"] - before == took_direct, f"{name}: the stock app went direct"
        assert (a.status_code, _body(a)) == (b.status_code, _body(b)), name
        assert took_direct == served_direct, f"{name}: direct path taken {took_direct} times"
        assert a.headers.get("content-type") == b.headers.get("content-type"), name


def test_only_the_hot_routes_take_the_direct_path() -> None:
    routes = [r for router in ROUTERS for r in router.routes]
    direct_routes = sorted(
        (sorted(r.methods or ())[0], r.path)
        for r in routes
        if isinstance(r, direct.DirectRoute) and direct._Plan.of(r) is not None
    )
    assert direct_routes == [
        ("GET", "/v1/datasets/{dataset_id}/budget"),
        ("POST", "/v1/datasets/{dataset_id}/charges"),
    ]


def test_the_direct_path_knows_every_dependency_it_replaces(sqlite_url: str) -> None:
    """The direct path reads a route's own dependant; the dependencies an app or a router adds
    to it are not there. It does the app's one (``reject_unsafe_parameters``) itself: a new
    one would be skipped, so this fails until ``app.api.direct`` learns it."""
    app = create_app(make_settings(sqlite_url))
    assert [d.dependency for d in app.router.dependencies] == [reject_unsafe_parameters]
    assert datasets.router.dependencies == []
