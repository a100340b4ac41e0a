"""Every PLD request's work is bounded by counting it (audit bounded43 F2/F3): one Laplace entry
with count 10^9 took 4.5 s of CPU in a compose, a charge or a dry run, and a calibration for a
discrete Laplace with sensitivity near 10^6 built ten candidates of 0.44 s each. Construction
steps and convolutions are priced (``PldWork``) before they run; nothing here is timed."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.accounting import pld as pld_module
from app.accounting import pld_mechanisms as pm
from app.accounting.pld import PldWork, PldWorkExceeded, interval_for_budget
from tests.conftest import new_dataset

BUDGET = {"epsilon": 1.0, "delta": 1e-6}
LAPLACE = {"mechanism": "laplace", "epsilon": 0.1, "count": 50}


def _work(entry: dict[str, Any], interval: float = pld_module.BASE_INTERVAL) -> float:
    meter = PldWork()  # counted, no limit
    pm.for_mechanism(entry, interval=interval, work=meter)
    return meter.spent


def test_work_is_the_same_from_the_cache_and_a_construction_at_the_limit_fits() -> None:
    pm.clear_cache()
    built = _work(LAPLACE)
    assert built > 0 and _work(LAPLACE) == built  # a cache hit charges what it took
    pm.for_mechanism(LAPLACE, work=PldWork(built))  # exactly at the limit: accepted
    with pytest.raises(PldWorkExceeded, match="'laplace', count 50"):
        pm.for_mechanism(LAPLACE, work=PldWork(built - 1))


def test_a_refused_construction_stops_within_its_limit_and_is_not_redone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """count 10^9: about 60 convolutions of up to 2^20 points. The points convolved are counted
    as they run: never more than the meter allowed, and a retry convolves nothing."""
    pm.clear_cache()
    convolved: list[int] = []
    real = pld_module._convolve_arrays

    def counted(a: Any, b: Any, *rest: Any) -> Any:
        convolved.append(a.size + b.size)
        return real(a, b, *rest)

    monkeypatch.setattr(pld_module, "_convolve_arrays", counted)
    huge = {"mechanism": "laplace", "epsilon": 100.0, "count": 10**9}
    limit = 400_000
    meter = PldWork(limit)
    with pytest.raises(PldWorkExceeded) as refused:
        pm.for_mechanism(huge, work=meter)
    assert refused.value.limit == limit and refused.value.needed > limit
    assert meter.spent <= limit and sum(convolved) <= limit
    done = len(convolved)
    with pytest.raises(PldWorkExceeded):
        pm.for_mechanism(huge, work=PldWork(limit))
    assert len(convolved) == done


def test_compose_at_the_limit_uses_the_pld_and_beyond_it_the_curve_rule(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = {"mechanisms": [LAPLACE], "delta": 1e-6, "accounting": "pld"}
    work = _work(LAPLACE) + pld_module.Pld.identity().size + 2 * 2**12  # the composition too
    exact = PldWork()
    pm.compose_all([LAPLACE], work=exact)
    monkeypatch.setattr(pm, "PLD_WORK_LIMIT", exact.spent)
    r = client.post("/v1/accounting/compose", json=body)
    assert r.status_code == 200 and "pld" in r.json()["conversions"], r.text
    monkeypatch.setattr(pm, "PLD_WORK_LIMIT", exact.spent - 1)
    r = client.post("/v1/accounting/compose", json=body)
    assert r.status_code == 200, r.text
    assert "pld" not in r.json()["conversions"] and r.json()["method"] != "pld"
    assert r.json()["epsilon"] == min(r.json()["conversions"].values())
    assert work > 0


def test_a_huge_count_is_answered_by_the_curve_rule_with_the_real_limit(
    client: TestClient,
) -> None:
    body = {
        "mechanisms": [{"mechanism": "laplace", "epsilon": 100.0, "count": 10**9}],
        "delta": 1e-6,
        "accounting": "pld",
    }
    pm.clear_cache()
    r = client.post("/v1/accounting/compose", json=body)
    assert r.status_code == 200, r.text
    assert "pld" not in r.json()["conversions"]
    assert r.json()["epsilon"] == min(r.json()["conversions"].values())


@pytest.mark.parametrize("how", ["charge", "dry_run", "reservation"])
def test_a_pld_dataset_accepts_an_entry_at_the_limit_and_refuses_one_beyond(
    client: TestClient, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    ds = new_dataset(client, f"pld-work-{how}", budget=BUDGET, accounting="pld", adaptive=False)
    url = f"/v1/datasets/{ds['id']}"
    entry = {"mechanism": "randomized_response", "epsilon": 0.01, "k": 2, "count": 64}
    work = _work(entry, interval_for_budget(**BUDGET))

    def send() -> Any:
        path = "reservations" if how == "reservation" else "charges"
        params = {"dry_run": "true"} if how == "dry_run" else {}
        return client.post(f"{url}/{path}", params=params, json={"mechanism": entry})

    monkeypatch.setattr(pm, "PLD_WORK_LIMIT", work - 1)
    r = send()
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert "count 64" in detail and f"{work - 1:,.0f} units" in detail and "'rdp'" in detail
    assert r.json()["pld_work_limit"] == work - 1
    assert client.get(f"{url}/budget").json()["entries"] == 0
    monkeypatch.setattr(pm, "PLD_WORK_LIMIT", work)
    r = send()
    assert r.status_code in (200, 201), r.text


def test_a_pld_calibration_counts_constructions_in_its_work(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Discrete Laplace at sensitivity 999,986: each candidate's construction is linear in the
    sensitivity (7.2 million units). The answer's own distribution is built once, and no
    candidate after it fits the work: one construction, and the curve rule's answer."""
    ds = new_dataset(client, "pld-cal-dl", budget=BUDGET, accounting="pld", adaptive=False)
    url = f"/v1/datasets/{ds['id']}"
    for m in ({"mechanism": "laplace", "epsilon": 0.05}, {"mechanism": "gaussian", "sigma": 20.0}):
        assert client.post(f"{url}/charges", json={"mechanism": m}).status_code == 201
    pm.clear_cache()
    params = {"mechanism": "discrete_laplace", "sensitivity": 999_986}
    r = client.get(f"{url}/calibrate", params=params)
    assert r.status_code == 200, r.text
    assert pm.cache_info().misses == 1  # (a candidate refused for its work is no miss)
    dry = client.post(
        f"{url}/charges", params={"dry_run": "true"}, json={"mechanism": r.json()["mechanism"]}
    )
    assert dry.status_code == 200, dry.text
