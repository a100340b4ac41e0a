"""Committing or releasing a hold finds its allocation's and blocks' tallies (``prepare``, which
may refuse with a 422) before it writes anything. ``run_locked`` commits a unit's writes even
when the unit raises, so a status set before that step would stand without its ledger entry: a
"committed" reservation with nothing charged, or a release whose dataset held sum dropped while
its allocation kept the hold. No input reaches such a refusal today (an outside audit traced the
path), so the refusal is injected here, where ``prepare`` is called."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.errors import Unprocessable
from app.services import admission
from tests.conftest import new_dataset


def _state(client: TestClient, ds: str, rid: str) -> tuple[Any, ...]:
    budget = client.get(f"/v1/datasets/{ds}/budget").json()
    alloc = client.get(f"/v1/datasets/{ds}/allocations/team").json()
    ledger = client.get(f"/v1/datasets/{ds}/ledger").json()
    reservation = client.get(f"/v1/reservations/{rid}")
    status = reservation.json().get("status") if reservation.status_code == 200 else None
    return (
        budget["entries"],
        budget["spent"],
        budget.get("reserved"),
        alloc["spent"],
        alloc.get("reserved"),
        len(ledger["entries"]),
        status,
    )


@pytest.mark.parametrize("action", ["commit", "release"])
def test_a_refused_resolution_changes_nothing(
    client: TestClient, monkeypatch: pytest.MonkeyPatch, action: str
) -> None:
    ds = new_dataset(client, "held", budget={"epsilon": 2.0, "delta": 1e-6})["id"]
    r = client.post(
        f"/v1/datasets/{ds}/allocations",
        json={"name": "team", "budget": {"epsilon": 1.0, "delta": 1e-6}},
    )
    assert r.status_code == 201, r.text
    r = client.post(
        f"/v1/datasets/{ds}/reservations",
        json={"mechanism": {"mechanism": "laplace", "epsilon": 0.25}, "allocation": "team"},
    )
    assert r.status_code == 201, r.text
    rid = r.json()["id"]
    before = _state(client, ds, rid)

    calls = 0
    real = admission.prepare

    def refusing(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        raise Unprocessable("injected: the hold's allocation refuses")

    monkeypatch.setattr(admission, "prepare", refusing)
    if action == "commit":
        r = client.post(f"/v1/reservations/{rid}/commit")
    else:
        r = client.delete(f"/v1/reservations/{rid}")
    assert r.status_code == 422, r.text
    assert calls == 1  # the refusal came from resolving the hold's tallies
    assert _state(client, ds, rid) == before

    # the same request once nothing refuses: resolved, and counted once
    monkeypatch.setattr(admission, "prepare", real)
    if action == "commit":
        r = client.post(f"/v1/reservations/{rid}/commit")
        assert r.status_code == 200, r.text
        after = _state(client, ds, rid)
        assert after[0] == before[0] + 1 and after[5] == before[5] + 1
        assert after[-1] == "committed"
    else:
        r = client.delete(f"/v1/reservations/{rid}")
        assert r.status_code == 200, r.text
        after = _state(client, ds, rid)
        assert after[0] == before[0] and after[5] == before[5]
        assert after[-1] == "released"
