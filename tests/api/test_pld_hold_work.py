"""Resolving a hold of a ``pld`` dataset (commit, release, expiry) composes the distributions of
every active hold again (a PLD cannot be subtracted), building each one the construction cache
does not hold: after a restart, on another worker or replica, or once evicted. Each hold was
admitted within one request's ``PLD_WORK_LIMIT``, but nothing bounded them together: 8 holds of
a discrete Laplace at sensitivity 10^6 (a cross-feature audit) made one release, on a cold
cache, spend 4.9e7 units (7.5 s of CPU) under the dataset's lock, and every further hold added
about 0.9 s. A reservation is now admitted only if recomposing the active holds with it fits one
request's limit, so what resolving any of them does is bounded. Work is counted, not timed."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.accounting import pld as pld_module
from app.accounting import pld_mechanisms as pm
from app.accounting.pld import PldWork, interval_for_budget
from tests.conftest import new_dataset

BUDGET = {"epsilon": 5.0, "delta": 1e-6}
HOLDS = 10


def _hold(k: int) -> dict[str, Any]:
    """Distinct holds (each its own construction): dp_accounting's discrete Laplace."""
    return {"mechanism": "discrete_laplace", "epsilon": 0.01 + 0.001 * k, "sensitivity": 20_000}


def _work(entry: dict[str, Any]) -> float:
    meter = PldWork()  # counted, no limit
    pm.for_mechanism(entry, interval=interval_for_budget(**BUDGET), work=meter)
    return meter.spent


def test_resolving_a_hold_on_a_cold_cache_stays_within_one_requests_work(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    ds = new_dataset(client, "pld-holds", budget=BUDGET, accounting="pld", adaptive=False)
    url = f"/v1/datasets/{ds['id']}"
    one = _work(_hold(0))
    limit = 4 * one  # about four such holds' constructions (and their compositions) fit
    monkeypatch.setattr(pm, "PLD_WORK_LIMIT", limit)
    held: list[str] = []
    refused: list[Any] = []
    for k in range(HOLDS):
        r = client.post(f"{url}/reservations", json={"mechanism": _hold(k), "ttl_seconds": 600})
        assert r.status_code in (201, 422), r.text
        if r.status_code == 201:
            held.append(r.json()["id"])
        else:
            refused.append(r.json())
    assert 1 <= len(held) < HOLDS and refused
    assert all(p["pld_work_limit"] == limit and "active holds" in p["detail"] for p in refused)
    budget = client.get(f"{url}/budget").json()
    assert budget["reserved"]["count"] == len(held) and budget["entries"] == 0

    # a cold cache (a restart, another worker): count the construction units and the points
    # convolved while one hold is released and the others are composed again
    spent = 0.0
    charge, convolve = pm._charge, pld_module._convolve_arrays

    def counted_charge(units: float) -> None:
        nonlocal spent
        spent += units
        charge(units)

    def counted_convolve(a: Any, b: Any, *rest: Any) -> Any:
        nonlocal spent
        spent += a.size + b.size
        return convolve(a, b, *rest)

    pm.clear_cache()
    monkeypatch.setattr(pm, "_charge", counted_charge)
    monkeypatch.setattr(pld_module, "_convolve_arrays", counted_convolve)
    r = client.delete(f"/v1/reservations/{held[0]}")
    assert r.status_code == 200, r.text
    assert 0 < spent <= limit, (spent, limit)
    assert client.post("/v1/admin/verify").json()["ok"]


def test_a_hold_at_the_limit_alone_is_admitted(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One hold whose construction is exactly the limit: nothing else to compose, admitted."""
    ds = new_dataset(client, "pld-one-hold", budget=BUDGET, accounting="pld", adaptive=False)
    monkeypatch.setattr(pm, "PLD_WORK_LIMIT", _work(_hold(0)))
    r = client.post(
        f"/v1/datasets/{ds['id']}/reservations", json={"mechanism": _hold(0), "ttl_seconds": 60}
    )
    assert r.status_code == 201, r.text
