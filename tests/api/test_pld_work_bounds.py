"""The work a pld request does, bounded and out of the lock (a helper's search): a DP-SGD PLD
took 2.5-4.3 s where the bound assumed a second, a compose built a costly PLD before finding
an entry with none, and a charge built its PLD under the dataset's lock, which on SQLite held
every other dataset's writes for seconds. Work is counted (constructions), never timed."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.accounting import pld_mechanisms as pm
from app.services import admission
from tests.conftest import new_dataset

BUDGET = {"epsilon": 8.0, "delta": 1e-6}


def _sgd(i: int) -> dict[str, Any]:
    return {"mechanism": "subsampled_gaussian", "sigma": 2.0 + i, "sample_rate": 0.01, "steps": 10}


def test_a_subsampled_gaussian_counts_as_several_constructions() -> None:
    assert pm.too_many_distinct([_sgd(0), _sgd(1)]) is None
    assert pm.too_many_distinct([_sgd(0)] + [{"mechanism": "laplace", "epsilon": 0.1}] * 4) is None
    why = pm.too_many_distinct([_sgd(0), _sgd(1), _sgd(2)])
    assert why is not None and f"at most {pm.MAX_DISTINCT} distinct" in why
    assert pm.too_many_distinct([_sgd(0)] + [{"mechanism": "laplace", "epsilon": 0.1}] * 5)
    # a sample rate of 1 is a plain Gaussian: one construction
    full = {**_sgd(0), "sample_rate": 1.0}
    assert pm.construction_weight(full) == 1
    assert pm.too_many_distinct([full] * pm.MAX_DISTINCT) is None


def test_a_compose_finds_an_entry_without_a_pld_before_building_any() -> None:
    pm.clear_cache()
    with pytest.raises(pm.NoPldError):
        pm.compose_all(
            [
                {"mechanism": "rappor", "epsilon": 0.5, "count": 140_575},
                {"mechanism": "zcdp", "rho": 1e-5},
            ]
        )
    assert pm.cache_info().misses == 0


def test_three_dp_sgd_runs_in_one_pld_request_are_422(client: TestClient) -> None:
    body = {"mechanisms": [_sgd(i) for i in range(3)], "delta": 1e-6, "accounting": "pld"}
    r = client.post("/v1/accounting/compose", json=body)
    assert r.status_code == 422 and "counting as 4" in r.json()["detail"], r.text
    ds = new_dataset(client, "pld-bound", budget=BUDGET, accounting="pld", adaptive=False)
    event = {
        "type": "ComposedDpEvent",
        "events": [
            {
                "type": "PoissonSampledDpEvent",
                "sampling_probability": 0.01,
                "event": {"type": "GaussianDpEvent", "noise_multiplier": 2.0 + i},
            }
            for i in range(3)
        ],
    }
    r = client.post(f"/v1/datasets/{ds['id']}/charges/dp_event", json={"dp_event": event})
    assert r.status_code == 422 and "counting as 4" in r.json()["detail"], r.text
    assert client.get(f"/v1/datasets/{ds['id']}/budget").json()["entries"] == 0


@pytest.mark.parametrize("how", ["charge", "reservation", "dp_event"])
def test_a_pld_charge_builds_its_distribution_before_taking_the_lock(
    client: TestClient, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    ds = new_dataset(client, f"pld-{how}", budget=BUDGET, accounting="pld", adaptive=False)
    url = f"/v1/datasets/{ds['id']}"
    first = {"mechanism": {"mechanism": "laplace", "epsilon": 0.01}}
    assert client.post(f"{url}/charges", json=first).status_code == 201  # the grid is seen
    pm.clear_cache()
    built_under_lock: list[int] = []
    real = admission.entry_pld

    def counted(st: Any, wire: dict[str, Any], *work: Any) -> Any:
        before = pm.cache_info().misses
        out = real(st, wire, *work)
        built_under_lock.append(pm.cache_info().misses - before)
        return out

    monkeypatch.setattr(admission, "entry_pld", counted)
    mechanism = _sgd(7)
    if how == "charge":
        r = client.post(f"{url}/charges", json={"mechanism": mechanism})
    elif how == "reservation":
        r = client.post(f"{url}/reservations", json={"mechanism": mechanism})
    else:
        event = {
            "type": "PoissonSampledDpEvent",
            "sampling_probability": 0.01,
            "event": {"type": "GaussianDpEvent", "noise_multiplier": 9.0},
        }
        r = client.post(f"{url}/charges/dp_event", json={"dp_event": {**event}})
    assert r.status_code == 201, r.text
    assert built_under_lock and sum(built_under_lock) == 0, built_under_lock
    assert pm.cache_info().misses >= 1  # built, outside the lock


def test_distinct_dp_sgd_curves_per_request_are_bounded(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A compose of 10,000 distinct subsampled Gaussians (under the 1 MiB body limit) cost
    16.8 s of CPU, with a viewer key: at most MAX_DISTINCT_RUNS distinct (noise multiplier,
    sample rate) pairs are computed per request, counted before any curve is."""
    from app.accounting import subsampled_gaussian as sgm
    from app.accounting.kinds import subsampled_gaussian as kind

    computed: list[int] = []
    real = sgm.rdp_batch

    def counted(q: Any, sigma: Any, *args: Any, **kwargs: Any) -> Any:
        computed.append(len(q))
        return real(q, sigma, *args, **kwargs)

    monkeypatch.setattr(kind, "rdp_batch", counted)
    sgm.subsampled_gaussian_rdp.cache_clear()
    n = kind.MAX_DISTINCT_RUNS + 1
    runs = [
        {
            "mechanism": "subsampled_gaussian",
            "sigma": 1.0 + i / 1000,
            "sample_rate": 0.01,
            "steps": 1,
        }
        for i in range(n)
    ]
    r = client.post("/v1/accounting/compose", json={"mechanisms": runs, "delta": 1e-6})
    assert r.status_code == 422 and f"at most {n - 1} distinct" in r.json()["detail"], r.text
    event = {
        "type": "ComposedDpEvent",
        "events": [
            {
                "type": "PoissonSampledDpEvent",
                "sampling_probability": 0.01,
                "event": {"type": "GaussianDpEvent", "noise_multiplier": 1.0 + i / 1000},
            }
            for i in range(n)
        ],
    }
    ds = new_dataset(client, "sgd-bound", budget=BUDGET, accounting="rdp", adaptive=False)
    r = client.post(f"/v1/datasets/{ds['id']}/charges/dp_event", json={"dp_event": event})
    assert r.status_code == 422 and f"at most {n - 1} distinct" in r.json()["detail"], r.text
    assert sum(computed) == 0  # refused before any curve was computed
    # the same pairs with other step counts, and a sample rate of 1, count once / not at all
    same = [{**runs[0], "steps": 1 + i} for i in range(n)] + [{**runs[1], "sample_rate": 1.0}]
    r = client.post("/v1/accounting/compose", json={"mechanisms": same, "delta": 1e-6})
    assert r.status_code == 200, r.text
    r = client.post("/v1/accounting/compose", json={"mechanisms": runs[: n - 1], "delta": 1e-6})
    assert r.status_code == 200, r.text
