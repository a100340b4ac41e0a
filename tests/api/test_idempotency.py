"""Invariant 3: the same Idempotency-Key charges once and returns the first answer."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from fastapi.testclient import TestClient

from tests.conftest import new_dataset

GAUSS = {"mechanism": {"mechanism": "gaussian", "sigma": 10.0}, "label": "count"}


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
