"""Random sequences across features built separately: allocations (overbooked, some with their
own part of delta for entries that carry one), time-partitioned datasets (day and week blocks,
with and without a lifetime budget), holds (reserve, commit, release), Idempotency-Key
replays, dry runs and calibration, on rdp (adaptive and not) and zcdp datasets. Seeded, a fixed
number of steps (counted, not timed). After each step: never a 5xx; a dry run that admits is
followed by a charge that is admitted with the spend it announced; a replay answers what the
first request answered; a calibrated mechanism is admitted by a dry run. At the end: verify
finds every total consistent, and every figure a view reports (the dataset's, the lifetime's,
each block's, each allocation's and each allocation's share of a block) is at least what
dp_accounting's optimistic privacy loss distribution of the entries it covers gives at the
view's delta (an independent lower bound of the exact composition), with the entries read back
from the JSON Lines export."""

from __future__ import annotations

import json
import random
from datetime import date, timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.conftest import new_dataset
from tests.unit.pld_ledgers import reference

BUDGET = {"epsilon": 2.0, "delta": 1e-6}
CONFIGS: list[dict[str, Any]] = [
    {"adaptive": False},
    {"entry_delta_budget": 4e-7},  # adaptive rdp, fixed orders
    {"accounting": "zcdp", "adaptive": False},
    {
        "adaptive": False,
        "partition": {"unit": "day"},
        "lifetime_budget": {"epsilon": 4.0, "delta": 1e-6},
    },
    {"partition": {"unit": "day"}, "entry_delta_budget": 4e-7},
    {
        "accounting": "zcdp",
        "partition": {"unit": "week"},
        "entry_delta_budget": 4e-7,
        "lifetime_budget": {"epsilon": 3.0, "delta": 1e-6},
        "lifetime_entry_delta_budget": 4e-7,
    },
]
STEPS = 70


def _mechanism(rnd: random.Random) -> dict[str, Any]:
    """Kinds dp_accounting has a privacy loss distribution for (the oracle)."""
    kind = rnd.choice(
        ["gaussian", "laplace", "randomized_response", "approx_dp", "pure_dp", "discrete_laplace"]
    )
    e = 10 ** rnd.uniform(-1.5, -0.3)
    m: dict[str, Any] = {"mechanism": kind}
    if kind == "gaussian":
        m["sigma"] = 10 ** rnd.uniform(0.2, 1.0)
    elif kind == "approx_dp":
        m.update(epsilon=e, delta=rnd.choice([5e-8, 1.5e-7, 3e-7]))
    elif kind == "randomized_response":
        m.update(epsilon=e, k=rnd.choice([2, 3]))
    elif kind == "discrete_laplace":
        m.update(epsilon=e, sensitivity=rnd.choice([1, 2]))
    else:
        m["epsilon"] = e
    if rnd.random() < 0.2:
        m["count"] = rnd.choice([2, 3])
    return m


def _keys(unit: str, first: str, last: str) -> list[str]:
    if unit == "day":
        a, b = date.fromisoformat(first), date.fromisoformat(last)
        return [(a + timedelta(days=i)).isoformat() for i in range((b - a).days + 1)]
    year, a, b = first[:4], int(first[6:]), int(last[6:])
    return [f"{year}-W{w:02d}" for w in range(a, b + 1)]


def _blocks(rnd: random.Random, unit: str) -> dict[str, str]:
    if unit == "day":
        a = rnd.randint(1, 4)
        return {"from": f"2026-03-{a:02d}", "to": f"2026-03-{a + rnd.randint(0, 2):02d}"}
    a = rnd.randint(10, 11)
    return {"from": f"2026-W{a}", "to": f"2026-W{a + rnd.randint(0, 1)}"}


def _lower_bound(entries: list[dict[str, Any]], delta: float, cache: dict[str, float]) -> float:
    """dp_accounting's optimistic PLD epsilon of ``entries`` at ``delta`` (0 for none)."""
    if not entries:
        return 0.0
    key = json.dumps([sorted(e.items()) for e in entries] + [delta])
    if key not in cache:
        cache[key] = reference(entries, pessimistic=False).get_epsilon_for_delta(delta)
    return cache[key]


@pytest.mark.parametrize("seed", [11])
def test_random_structure_sequences_keep_the_invariants(client: TestClient, seed: int) -> None:
    rnd = random.Random(seed)
    datasets: list[tuple[dict[str, Any], list[str]]] = []
    for i, config in enumerate(CONFIGS):
        ds = new_dataset(client, f"cross-{i}", budget=BUDGET, **config)
        names = ["team-a", "team-b"]
        for name, eps in zip(names, (1.2, 1.5), strict=True):  # overbooked: 2.7 > 2
            body: dict[str, Any] = {"name": name, "budget": {"epsilon": eps, "delta": 1e-6}}
            if "entry_delta_budget" in config and name == "team-a":
                body["entry_delta_budget"] = 2e-7
            r = client.post(f"/v1/datasets/{ds['id']}/allocations", json=body)
            assert r.status_code == 201, r.text
        datasets.append((ds, names))
    holds: list[str] = []
    statuses: dict[int, int] = {}
    for step in range(STEPS):
        ds, names = rnd.choice(datasets)
        url = f"/v1/datasets/{ds['id']}"
        unit = (ds.get("partition") or {}).get("unit")
        body: dict[str, Any] = {"mechanism": _mechanism(rnd)}
        if unit is not None:
            body["blocks"] = _blocks(rnd, unit)
        if rnd.random() < 0.7:
            body["allocation"] = rnd.choice(names)
        op = rnd.choices(["dry", "reserve", "resolve", "replay", "calibrate"], [5, 2, 2, 2, 1])[0]
        if op == "dry":
            dry = client.post(f"{url}/charges", params={"dry_run": "true"}, json=body)
            real = client.post(f"{url}/charges", json=body)
            assert dry.status_code < 500 and real.status_code < 500, (step, body, real.text)
            assert dry.status_code == {201: 200}.get(real.status_code, real.status_code), (
                step, body, dry.text, real.text,
            )  # fmt: skip
            if real.status_code == 201:
                would, spent = dry.json()["would_spend"], real.json()["spent"]
                assert spent["epsilon"] == pytest.approx(would["epsilon"], rel=1e-9, abs=1e-12)
            statuses[real.status_code] = statuses.get(real.status_code, 0) + 1
        elif op == "reserve":
            r = client.post(f"{url}/reservations", json={**body, "ttl_seconds": 3600})
            assert r.status_code in (201, 409, 422), (step, body, r.text)
            if r.status_code == 201:
                holds.append(r.json()["id"])
        elif op == "resolve" and holds:
            rid = holds.pop(rnd.randrange(len(holds)))
            if rnd.random() < 0.6:
                r = client.post(f"/v1/reservations/{rid}/commit")
            else:
                r = client.delete(f"/v1/reservations/{rid}")
            assert r.status_code == 200, (step, r.text)
        elif op == "replay":
            key = {"Idempotency-Key": f"replay-{step}"}
            first = client.post(f"{url}/charges", json=body, headers=key)
            again = client.post(f"{url}/charges", json=body, headers=key)
            assert first.status_code < 500, (step, body, first.text)
            if first.status_code in (201, 409):
                assert again.status_code == first.status_code, (step, first.text, again.text)
                a, b = first.json(), again.json()
                if first.status_code == 201:
                    assert b["entry"] == a["entry"] and b["spent"] == a["spent"]
                else:
                    assert b["detail"] == a["detail"] and b.get("limit") == a.get("limit")
        elif op == "calibrate":
            params: dict[str, Any] = {"mechanism": rnd.choice(["gaussian", "laplace"])}
            if "allocation" in body:
                params["allocation"] = body["allocation"]
            if unit is not None:
                params["block_from"], params["block_to"] = (
                    body["blocks"]["from"],
                    body["blocks"]["to"],
                )
            r = client.get(f"{url}/calibrate", params=params)
            assert r.status_code in (200, 409), (step, params, r.text)
            if r.status_code == 200:
                check = client.post(
                    f"{url}/charges",
                    params={"dry_run": "true"},
                    json={**body, "mechanism": r.json()["mechanism"]},
                )
                assert check.status_code == 200, (step, params, r.json(), check.text)
    assert statuses.get(201, 0) > 10 and statuses.get(409, 0) > 0, statuses

    report = client.post("/v1/admin/verify").json()
    assert report["ok"], [d for d in report["datasets"] if not d["ok"]]

    cache: dict[str, float] = {}
    checked = 0

    def at_least(
        what: str, reported: float | None, entries: list[dict[str, Any]], d: float
    ) -> None:
        nonlocal checked
        bound = _lower_bound(entries, d, cache)
        assert reported is not None and reported >= bound * (1 - 1e-9) - 1e-12, (
            what, reported, bound, entries,
        )  # fmt: skip
        checked += 1

    for ds, names in datasets:
        url = f"/v1/datasets/{ds['id']}"
        export = client.get(f"{url}/ledger", params={"format": "jsonl"})
        assert export.status_code == 200
        rows = [json.loads(line) for line in export.text.splitlines() if line.strip()]

        def mechanisms(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
            return [{k: v for k, v in e["mechanism"].items() if k != "v"} for e in rows]

        budget = client.get(f"{url}/budget").json()
        unit = (ds.get("partition") or {}).get("unit")
        life = ds.get("lifetime_budget") or BUDGET
        at_least(f"{ds['name']} spent", budget["spent"]["epsilon"], mechanisms(rows), life["delta"])
        for name in names:
            a = client.get(f"{url}/allocations/{name}").json()
            mine = [e for e in rows if e["allocation_name"] == name]
            spent = a["lifetime_spent"] if unit is not None else a["spent"]
            at_least(f"{ds['name']}/{name}", spent["epsilon"], mechanisms(mine), spent["delta"])
        if unit is None:
            continue
        covered: dict[str, list[dict[str, Any]]] = {}
        for e in rows:
            for k in _keys(unit, e["blocks"]["from"], e["blocks"]["to"]):
                covered.setdefault(k, []).append(e)
        first, last = min(covered), max(covered)
        for name in [None, *names]:
            params = {"from": first, "to": last, **({"allocation": name} if name else {})}
            for b in client.get(f"{url}/blocks", params=params).json()["blocks"]:
                mine = [
                    e for e in covered.get(b["block"], []) if name in (None, e["allocation_name"])
                ]
                what = f"{ds['name']}/{name or '-'}/{b['block']}"
                at_least(what, b["spent"]["epsilon"], mechanisms(mine), b["spent"]["delta"])
    assert checked > 30
