"""Invariant 3: the same Idempotency-Key charges once and returns the first answer."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from fastapi.testclient import TestClient

from tests.conftest import new_dataset

GAUSS = {"mechanism": {"mechanism": "gaussian", "sigma": 10.0}, "label": "count"}
EVENT = {"dp_event": {"type": "GaussianDpEvent", "noise_multiplier": 10.0}}


def test_replay_returns_first_answer_and_charges_once(client: TestClient) -> None:
    ds = new_dataset(client)
    url = f"/v1/datasets/{ds['id']}/charges"
    first = client.post(url, json=GAUSS, headers={"Idempotency-Key": "job-1"})
    second = client.post(url, json=GAUSS, headers={"Idempotency-Key": "job-1"})
    assert first.status_code == second.status_code == 201
    assert first.json() == second.json()
    assert client.get(f"/v1/datasets/{ds['id']}/budget").json()["entries"] == 1
    # a different key is a different charge
    assert client.post(url, json=GAUSS, headers={"Idempotency-Key": "job-2"}).status_code == 201
    assert client.get(f"/v1/datasets/{ds['id']}/budget").json()["entries"] == 2


def test_replayed_refusal_is_the_same_409_and_recorded_once(client: TestClient) -> None:
    ds = new_dataset(client)
    url = f"/v1/datasets/{ds['id']}/charges"
    big = {"mechanism": {"mechanism": "laplace", "epsilon": 5.0}}
    a = client.post(url, json=big, headers={"Idempotency-Key": "big"})
    b = client.post(url, json=big, headers={"Idempotency-Key": "big"})
    assert a.status_code == b.status_code == 409
    assert a.json() == b.json()
    assert len(client.get("/v1/rejections", params={"dataset": ds["id"]}).json()["rejections"]) == 1


def test_same_key_different_body_is_422(client: TestClient) -> None:
    ds = new_dataset(client)
    url = f"/v1/datasets/{ds['id']}/charges"
    assert client.post(url, json=GAUSS, headers={"Idempotency-Key": "k"}).status_code == 201
    other = {"mechanism": {"mechanism": "gaussian", "sigma": 11.0}}
    r = client.post(url, json=other, headers={"Idempotency-Key": "k"})
    assert r.status_code == 422
    assert "Idempotency-Key" in r.json()["detail"]
    assert client.get(f"/v1/datasets/{ds['id']}/budget").json()["entries"] == 1


def test_same_key_concurrently_charges_once(client: TestClient) -> None:
    ds = new_dataset(client)
    url = f"/v1/datasets/{ds['id']}/charges"
    n = 8
    barrier = threading.Barrier(n)

    def one(_: int) -> tuple[int, dict]:
        barrier.wait()
        r = client.post(url, json=GAUSS, headers={"Idempotency-Key": "same"})
        return r.status_code, r.json()

    with ThreadPoolExecutor(n) as pool:
        answers = list(pool.map(one, range(n)))
    assert {code for code, _ in answers} == {201}
    bodies = [body for _, body in answers]
    assert all(b == bodies[0] for b in bodies)
    assert client.get(f"/v1/datasets/{ds['id']}/budget").json()["entries"] == 1


def test_dry_run_ignores_and_does_not_store_the_key(client: TestClient) -> None:
    ds = new_dataset(client)
    url = f"/v1/datasets/{ds['id']}/charges"
    dry = client.post(url, json=GAUSS, headers={"Idempotency-Key": "d"}, params={"dry_run": "true"})
    assert dry.status_code == 200 and dry.json()["admitted"] is True
    real = client.post(url, json=GAUSS, headers={"Idempotency-Key": "d"})
    assert real.status_code == 201
    assert client.get(f"/v1/datasets/{ds['id']}/budget").json()["entries"] == 1


# --- records are per API key (h3 finding 5) --------------------------------------------------
# Two pipelines with their own keys that happen to send the same Idempotency-Key and body made
# one entry: the second release was never charged, and its answer named the first key's entry.


def _pipeline_key(client: TestClient, ds: dict) -> tuple[str, dict[str, str]]:
    made = client.post("/v1/keys", json={"role": "pipeline", "datasets": [ds["id"]]})
    assert made.status_code == 201, made.text
    return made.json()["id"], {"Authorization": f"Bearer {made.json()['key']}"}


def _as(auth: dict[str, str], idem: str) -> dict[str, str]:
    return {**auth, "Idempotency-Key": idem}


def test_two_keys_with_the_same_idempotency_key_are_two_charges(client: TestClient) -> None:
    ds = new_dataset(client)
    url = f"/v1/datasets/{ds['id']}/charges"
    (a_id, a), (b_id, b) = _pipeline_key(client, ds), _pipeline_key(client, ds)
    first_a = client.post(url, json=GAUSS, headers=_as(a, "daily-2026-11-24"))
    first_b = client.post(url, json=GAUSS, headers=_as(b, "daily-2026-11-24"))
    assert first_a.status_code == first_b.status_code == 201
    assert first_a.json()["entry"]["key_id"] == a_id
    assert first_b.json()["entry"]["key_id"] == b_id
    assert first_a.json()["entry"]["id"] != first_b.json()["entry"]["id"]
    assert client.get(f"/v1/datasets/{ds['id']}/budget").json()["entries"] == 2
    # each key's retry still answers its own first answer, and charges nothing more
    assert client.post(url, json=GAUSS, headers=_as(a, "daily-2026-11-24")).json() == first_a.json()
    assert client.post(url, json=GAUSS, headers=_as(b, "daily-2026-11-24")).json() == first_b.json()
    ledger = client.get(f"/v1/datasets/{ds['id']}/ledger").json()["entries"]
    assert sorted(e["key_id"] for e in ledger) == sorted([a_id, b_id])


def test_another_keys_request_is_refused_on_its_own(client: TestClient) -> None:
    ds = new_dataset(client)  # epsilon 1: one of these fits, two do not
    url = f"/v1/datasets/{ds['id']}/charges"
    (_, a), (b_id, b) = _pipeline_key(client, ds), _pipeline_key(client, ds)
    big = {"mechanism": {"mechanism": "laplace", "epsilon": 0.6}}
    assert client.post(url, json=big, headers=_as(a, "nightly")).status_code == 201
    refused = client.post(url, json=big, headers=_as(b, "nightly"))
    assert refused.status_code == 409
    assert refused.headers["content-type"].startswith("application/problem+json")
    rejections = client.get("/v1/rejections", params={"dataset": ds["id"]}).json()["rejections"]
    assert [r["key_id"] for r in rejections] == [b_id]
    # and B's refusal is B's to replay: the same 409, recorded once
    again = client.post(url, json=big, headers=_as(b, "nightly"))
    assert again.status_code == 409 and again.json() == refused.json()
    assert len(client.get("/v1/rejections", params={"dataset": ds["id"]}).json()["rejections"]) == 1


def test_another_keys_different_body_is_not_a_422(client: TestClient) -> None:
    ds = new_dataset(client)
    url = f"/v1/datasets/{ds['id']}/charges"
    (_, a), (b_id, b) = _pipeline_key(client, ds), _pipeline_key(client, ds)
    assert client.post(url, json=GAUSS, headers=_as(a, "k")).status_code == 201
    other = {"mechanism": {"mechanism": "gaussian", "sigma": 11.0}}
    r = client.post(url, json=other, headers=_as(b, "k"))
    assert r.status_code == 201 and r.json()["entry"]["key_id"] == b_id
    # the same key with another body is still 422
    again = client.post(url, json=other, headers=_as(a, "k"))
    assert again.status_code == 422 and "Idempotency-Key" in again.json()["detail"]
    assert client.get(f"/v1/datasets/{ds['id']}/budget").json()["entries"] == 2


def test_two_keys_with_the_same_idempotency_key_are_two_dp_event_charges(
    client: TestClient,
) -> None:
    ds = new_dataset(client)
    url = f"/v1/datasets/{ds['id']}/charges/dp_event"
    (a_id, a), (b_id, b) = _pipeline_key(client, ds), _pipeline_key(client, ds)
    body = EVENT
    ra = client.post(url, json=body, headers=_as(a, "event-1"))
    rb = client.post(url, json=body, headers=_as(b, "event-1"))
    assert ra.status_code == rb.status_code == 201
    assert [e["key_id"] for e in ra.json()["entries"]] == [a_id]
    assert [e["key_id"] for e in rb.json()["entries"]] == [b_id]
    assert client.post(url, json=body, headers=_as(b, "event-1")).json() == rb.json()
    assert client.get(f"/v1/datasets/{ds['id']}/budget").json()["entries"] == 2


def test_two_keys_with_the_same_idempotency_key_are_two_reservations(
    client: TestClient,
) -> None:
    ds = new_dataset(client)
    url = f"/v1/datasets/{ds['id']}/reservations"
    (a_id, a), (b_id, b) = _pipeline_key(client, ds), _pipeline_key(client, ds)
    body = {"mechanism": {"mechanism": "laplace", "epsilon": 0.1}}
    ra = client.post(url, json=body, headers=_as(a, "plan"))
    rb = client.post(url, json=body, headers=_as(b, "plan"))
    assert ra.status_code == rb.status_code == 201
    assert (ra.json()["key_id"], rb.json()["key_id"]) == (a_id, b_id)
    assert ra.json()["id"] != rb.json()["id"]
    assert client.post(url, json=body, headers=_as(a, "plan")).json() == ra.json()
    assert client.get(f"/v1/datasets/{ds['id']}/budget").json()["reserved"]["count"] == 2


def test_two_keys_retrying_concurrently_charge_once_each(client: TestClient) -> None:
    ds = new_dataset(client)
    url = f"/v1/datasets/{ds['id']}/charges"
    keys = [_pipeline_key(client, ds), _pipeline_key(client, ds)]
    n = 8
    barrier = threading.Barrier(n)

    def one(i: int) -> tuple[str, int, dict]:
        key_id, auth = keys[i % 2]
        barrier.wait()
        r = client.post(url, json=GAUSS, headers=_as(auth, "same"))
        return key_id, r.status_code, r.json()

    with ThreadPoolExecutor(n) as pool:
        answers = list(pool.map(one, range(n)))
    assert {code for _, code, _ in answers} == {201}
    for key_id, _ in keys:
        bodies = [body for k, _, body in answers if k == key_id]
        assert len(bodies) == n // 2 and all(b == bodies[0] for b in bodies)
        assert bodies[0]["entry"]["key_id"] == key_id
    assert client.get(f"/v1/datasets/{ds['id']}/budget").json()["entries"] == 2


# --- one Idempotency-Key per request (h3 finding 12) -------------------------------------------


TAKING_A_KEY = {"charges": GAUSS, "charges/dp_event": EVENT, "reservations": GAUSS}
"""Every route that takes an Idempotency-Key, with a body it admits."""


def test_every_route_taking_an_idempotency_key_is_tested(sqlite_client: TestClient) -> None:
    paths = sqlite_client.get("/openapi.json").json()["paths"]
    taking = {
        path
        for path, operations in paths.items()
        for operation in operations.values()
        if any(p["name"] == "Idempotency-Key" for p in operation.get("parameters", []))
    }
    assert taking == {f"/v1/datasets/{{dataset_id}}/{p}" for p in TAKING_A_KEY}


@pytest.mark.parametrize("path", sorted(TAKING_A_KEY))
@pytest.mark.parametrize("values", [("first", "second"), ("same", "same")])
def test_a_repeated_idempotency_key_header_is_422(
    client: TestClient, path: str, values: tuple[str, str]
) -> None:
    ds = new_dataset(client)
    url, body = f"/v1/datasets/{ds['id']}/{path}", TAKING_A_KEY[path]
    r = client.post(url, json=body, headers=[("Idempotency-Key", v) for v in values])
    assert r.status_code == 422, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    assert "Idempotency-Key" in r.json()["detail"] and "once" in r.json()["detail"]
    budget = client.get(f"/v1/datasets/{ds['id']}/budget").json()
    assert budget["entries"] == 0 and not budget["reserved"]
    # neither value was stored: each, alone, is a new request
    for v in dict.fromkeys(values):
        assert client.post(url, json=body, headers={"Idempotency-Key": v}).status_code == 201


def test_a_repeated_idempotency_key_without_a_key_is_401(client: TestClient) -> None:
    ds = new_dataset(client)
    r = client.post(
        f"/v1/datasets/{ds['id']}/charges",
        json=GAUSS,
        headers=[
            ("Authorization", "Bearer nope"),
            ("Idempotency-Key", "a"),
            ("Idempotency-Key", "b"),
        ],
    )
    assert r.status_code == 401
