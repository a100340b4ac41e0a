"""Issue 10, item 2: no stored string holds a lone UTF-16 surrogate or a NUL character.

Each is refused with 422 naming the field, before anything is written (the whole database is
compared before and after); the same goes for path and query parameters that reach a query,
and for the Idempotency-Key header. Rows stored before the check still render.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.accounting.mechanisms import Laplace
from app.db import migrate
from app.principal import Principal, Role
from app.services import charges
from app.services.keys import SYSTEM
from tests.conftest import new_dataset
from tests.snapshot import Watcher, changed_tables

JSON = {"content-type": "application/json"}
BAD = {"surrogate": "a\ud800b", "nul": "a\x00b"}
REASON = {"surrogate": "surrogate", "nul": "NUL"}
LAPLACE = {"mechanism": "laplace", "epsilon": 0.01}


@pytest.fixture
def watcher(db_url: str) -> Iterator[Watcher]:
    w = Watcher(db_url)
    yield w
    w.close()


@pytest.fixture
def ds(client: TestClient) -> dict[str, Any]:
    return new_dataset(client, "hostile", budget={"epsilon": 10.0, "delta": 1e-6})


def _bodies(bad: str, ds_id: str) -> dict[str, tuple[str, str, dict[str, Any], str]]:
    """name -> (method, path, body, field the answer must name)."""
    charge = f"/v1/datasets/{ds_id}/charges"
    reserve = f"/v1/datasets/{ds_id}/reservations"
    budget = {"epsilon": 1.0, "delta": 1e-6}
    return {
        "charge label": ("POST", charge, {"mechanism": LAPLACE, "label": bad}, "label"),
        "charge metadata value": (
            "POST",
            charge,
            {"mechanism": LAPLACE, "metadata": {"a": {"b": ["ok", bad]}}},
            "metadata.a.b[1]",
        ),
        "charge metadata key": (
            "POST",
            charge,
            {"mechanism": LAPLACE, "metadata": {"a": {bad: 1}}},
            "the key metadata.a[",
        ),
        "refused charge metadata": (  # over budget: would be stored as a rejection
            "POST",
            charge,
            {"mechanism": {"mechanism": "laplace", "epsilon": 100.0}, "metadata": {"x": bad}},
            "metadata.x",
        ),
        "reservation label": ("POST", reserve, {"mechanism": LAPLACE, "label": bad}, "label"),
        "reservation metadata": (
            "POST",
            reserve,
            {"mechanism": LAPLACE, "metadata": {"x": bad}},
            "metadata.x",
        ),
        "dataset name": ("POST", "/v1/datasets", {"name": bad, "budget": budget}, "name"),
        "dataset description": (
            "POST",
            "/v1/datasets",
            {"name": "fine", "budget": budget, "description": bad},
            "description",
        ),
        "patched name": ("PATCH", f"/v1/datasets/{ds_id}", {"name": bad}, "name"),
        "patched description": (
            "PATCH",
            f"/v1/datasets/{ds_id}",
            {"description": bad},
            "description",
        ),
        "key label": ("POST", "/v1/keys", {"role": "viewer", "label": bad}, "label"),
        "key datasets": ("POST", "/v1/keys", {"role": "viewer", "datasets": [bad]}, "datasets"),
    }


CASES = sorted(_bodies("x", "ds").keys())


@pytest.mark.parametrize("case", CASES)
def test_stored_strings_are_checked_before_anything_is_written(
    client: TestClient, ds: dict, watcher: Watcher, case: str
) -> None:
    before = watcher.take()
    for bad in sorted(BAD):
        method, path, body, field = _bodies(BAD[bad], ds["id"])[case]
        r = client.request(method, path, content=json.dumps(body), headers=JSON)
        assert r.status_code == 422, (bad, r.text)
        assert r.headers["content-type"].startswith("application/problem+json")
        detail = r.json()["detail"]
        assert field in detail and REASON[bad] in detail, detail
    assert changed_tables(before, watcher.take()) == []


@pytest.mark.parametrize("bad", sorted(BAD))
def test_idempotent_retry_of_a_refused_body_is_refused_again(
    client: TestClient, ds: dict, watcher: Watcher, bad: str
) -> None:
    url = f"/v1/datasets/{ds['id']}/charges"
    hostile = json.dumps({"mechanism": LAPLACE, "metadata": {"x": BAD[bad]}})
    before = watcher.take()
    for _ in range(2):
        r = client.post(url, content=hostile, headers={**JSON, "Idempotency-Key": "job-7"})
        assert r.status_code == 422, r.text
    assert changed_tables(before, watcher.take()) == []
    # the key was not consumed: a clean request with it is a first request
    assert (
        client.post(
            url, json={"mechanism": LAPLACE}, headers={"Idempotency-Key": "job-7"}
        ).status_code
        == 201
    )


@pytest.mark.parametrize(
    "value", [b"a\x00b", b"a\x01b", b"tab\tinside", b"\xe9t\xe9", b"x" * 201, b""]
)
@pytest.mark.parametrize("operation", ["charges", "reservations"])
def test_idempotency_key_header_is_printable_ascii(
    client: TestClient, ds: dict, watcher: Watcher, value: bytes, operation: str
) -> None:
    before = watcher.take()
    r = client.post(
        f"/v1/datasets/{ds['id']}/{operation}",
        json={"mechanism": LAPLACE},
        headers={"Idempotency-Key": value},  # type: ignore[dict-item]
    )
    assert r.status_code == 422, r.text
    assert "Idempotency-Key" in r.json()["detail"]
    assert changed_tables(before, watcher.take()) == []


def _path_cases(ds_id: str) -> list[tuple[str, str, str]]:
    """(method, path, parameter named) with a NUL (%00) where a query would see it."""
    nul = "a%00b"
    return [
        ("GET", f"/v1/datasets/{nul}", "dataset_id"),
        ("PATCH", f"/v1/datasets/{nul}", "dataset_id"),
        ("POST", f"/v1/datasets/{nul}/charges", "dataset_id"),
        ("POST", f"/v1/datasets/{nul}/reservations", "dataset_id"),
        ("GET", f"/v1/datasets/{nul}/ledger", "dataset_id"),
        ("GET", f"/v1/reservations/{nul}", "reservation_id"),
        ("POST", f"/v1/reservations/{nul}/commit", "reservation_id"),
        ("DELETE", f"/v1/reservations/{nul}", "reservation_id"),
        ("DELETE", f"/v1/keys/{nul}", "key_id"),
        ("GET", f"/v1/rejections?dataset={nul}", "dataset"),
        ("GET", f"/v1/audit?action={nul}", "action"),
        ("GET", f"/v1/audit?dataset={nul}", "dataset"),
        ("GET", f"/v1/datasets/{ds_id}/ledger?cursor={nul}", "cursor"),
        ("GET", f"/v1/datasets/{ds_id}/rejections?cursor={nul}", "cursor"),
    ]


def test_nul_in_path_and_query_parameters_is_422(
    client: TestClient, ds: dict, watcher: Watcher
) -> None:
    before = watcher.take()
    for method, path, param in _path_cases(ds["id"]):
        body = {"mechanism": LAPLACE} if method == "POST" and "datasets" in path else None
        if method == "PATCH":
            body = {"description": "x"}
        r = client.request(method, path, json=body)
        assert r.status_code == 422, (method, path, r.text)
        assert param in r.json()["detail"] and "NUL" in r.json()["detail"]
    assert changed_tables(before, watcher.take()) == []


@pytest.mark.parametrize(
    "path", ["/v1/datasets/%ED%A0%80", "/v1/reservations/%ED%A0%80", "/v1/datasets/%FF%FE"]
)
def test_undecodable_path_bytes_are_not_found(client: TestClient, path: str) -> None:
    """A UTF-8-encoded surrogate or invalid UTF-8 in a path decodes to U+FFFD: no such thing."""
    r = client.get(path)
    assert r.status_code == 404, r.text


def test_rows_stored_before_the_check_are_repaired_by_migration(
    db_url: str, client: TestClient, ds: dict
) -> None:
    """Legacy data: a ledger entry, its idempotency record and a rejection whose metadata holds
    lone surrogates (written through the service, as the API allowed before) broke every page
    showing them; migration 0003 replaces each with U+FFFD, and the pages render."""
    db = client.app.state.db  # type: ignore[attr-defined]
    # as the admin key (idempotency records are per API key: its retries below must find it)
    [admin_id] = [k["id"] for k in client.get("/v1/keys").json()["keys"] if k["role"] == "admin"]
    charges.charge(
        db,
        Principal(key_id=admin_id, role=Role.ADMIN),
        ds["id"],
        mechanism=Laplace(epsilon=0.01),
        wire=LAPLACE,
        metadata={"x": "a\ud800b", "pair": "\U0001f600"},
        idempotency_key="legacy",
    )
    with pytest.raises(Exception, match="refused"):
        charges.charge(
            db,
            SYSTEM,
            ds["id"],
            mechanism=Laplace(epsilon=100.0),
            wire={"mechanism": "laplace", "epsilon": 100.0},
            metadata={"deep": [{"\udc80": "\udbff"}]},
        )
    migrate.downgrade(db_url, "0002", force=True)
    migrate.upgrade(db_url)
    ledger = client.get(f"/v1/datasets/{ds['id']}/ledger")
    assert ledger.status_code == 200
    assert ledger.json()["entries"][0]["metadata"] == {"x": "a\ufffdb", "pair": "\U0001f600"}
    rejections = client.get(f"/v1/datasets/{ds['id']}/rejections")
    assert rejections.status_code == 200
    assert rejections.json()["rejections"][0]["metadata"] == {"deep": [{"\ufffd": "\ufffd"}]}
    assert client.get("/v1/rejections").status_code == 200
    replay = client.post(
        f"/v1/datasets/{ds['id']}/charges",
        json={"mechanism": LAPLACE, "metadata": {"x": "a\ufffdb", "pair": "\U0001f600"}},
        headers={"Idempotency-Key": "legacy"},
    )
    assert replay.status_code == 422  # not the stored body (its hash is of the original)
    assert (
        client.post(
            f"/v1/datasets/{ds['id']}/charges",
            json={"mechanism": LAPLACE},
            headers={"Idempotency-Key": "legacy"},
        ).status_code
        == 422
    )
