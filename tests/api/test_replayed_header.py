"""A retried Idempotency-Key is answered with the stored first answer, byte for byte, and the
``Idempotent-Replayed: true`` header says so (a newcomer's walkthrough: a replay printed the same
"recorded as entry" line as a charge, with nothing to tell them apart). First answers carry no
such header."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from tests.conftest import new_dataset

GAUSS = {"mechanism": "gaussian", "sigma": 20.0}
EVENT = {"dp_event": {"type": "GaussianDpEvent", "noise_multiplier": 20.0}}


def test_replays_say_so_and_answer_the_first_answer(client: TestClient) -> None:
    url = f"/v1/datasets/{new_dataset(client)['id']}"
    cases: list[tuple[str, dict[str, Any]]] = [
        ("charges", {"mechanism": GAUSS}),
        ("reservations", {"mechanism": GAUSS}),
        ("charges/dp_event", EVENT),
    ]
    for path, body in cases:
        key = {"Idempotency-Key": f"retry-{path}"}
        first = client.post(f"{url}/{path}", json=body, headers=key)
        assert first.status_code == 201, first.text
        assert "idempotent-replayed" not in first.headers
        again = client.post(f"{url}/{path}", json=body, headers=key)
        assert again.status_code == 201, again.text
        assert again.headers["idempotent-replayed"] == "true"
        assert again.content == first.content
    fresh = client.post(f"{url}/charges", json={"mechanism": GAUSS})
    assert fresh.status_code == 201 and "idempotent-replayed" not in fresh.headers
    assert client.get(f"{url}/budget").json()["entries"] == 3  # two charges, one dp_event
