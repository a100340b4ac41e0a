"""Random sequences of dry runs, charges, reservations, commits and releases on datasets of
every accounting (seeded, a fixed number of steps: counted, not timed), with the invariants a
pipeline relies on checked after each step: never a 5xx; a dry run's answer is the charge's
that follows it, and so is its spend; nothing admitted past the budget; a commit of an active
hold is admitted; verify finds the totals consistent, and a rebuild keeps the reported spend.
Such a sequence found the 500 of a refusal with an infinite epsilon on PostgreSQL and a healthy
pld ledger failing verification."""

from __future__ import annotations

import random
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.conftest import new_dataset

CONFIGS: list[dict[str, Any]] = [
    {"accounting": "rdp", "adaptive": False},
    {},  # the default: adaptive rdp, fixed orders
    {"accounting": "zcdp", "adaptive": False},
    {"accounting": "zcdp", "adaptive": True},
    {"accounting": "pld", "adaptive": False},
    {"allowed_mechanisms": ["gaussian"]},
]


def _mechanism(rnd: random.Random, gaussian_only: bool) -> dict[str, Any]:
    kinds = ["gaussian"] if gaussian_only else [
        "gaussian", "laplace", "randomized_response", "subsampled_gaussian", "pure_dp",
        "approx_dp", "zcdp", "exponential", "discrete_laplace", "rappor", "rdp",
    ]  # fmt: skip
    kind = rnd.choice(kinds)
    e = 10 ** rnd.uniform(-2.5, 0.3)
    m: dict[str, Any] = {"mechanism": kind}
    if kind == "gaussian":
        m["sigma"] = 10 ** rnd.uniform(-0.3, 1.5)
    elif kind == "subsampled_gaussian":
        m.update(
            sigma=10 ** rnd.uniform(-0.2, 0.7),
            sample_rate=10 ** rnd.uniform(-4, 0),
            steps=rnd.choice([1, 10, 100]),
        )
    elif kind == "approx_dp":
        m.update(epsilon=e, delta=10 ** rnd.uniform(-12, -6))  # own delta may reach the budget's
    elif kind == "zcdp":
        m["rho"] = 10 ** rnd.uniform(-4, -0.5)
    elif kind == "discrete_laplace":
        m.update(epsilon=e, sensitivity=rnd.choice([1, 2, 7]))
    elif kind == "randomized_response":
        m.update(epsilon=e, k=rnd.choice([2, 3, 10]))
    elif kind == "rdp":
        m.update(orders=[2.0, 8.0, 64.0], epsilons=[0.01 * e, 0.05 * e, 0.4 * e])
    else:
        m["epsilon"] = e
    if rnd.random() < 0.3:
        m["count"] = rnd.choice([2, 5, 20])
    return m


@pytest.mark.parametrize("seed", [4, 6])
def test_random_sequences_keep_the_invariants(client: TestClient, seed: int) -> None:
    rnd = random.Random(seed)
    datasets = [
        new_dataset(
            client,
            f"seq-{i}",
            budget={"epsilon": rnd.choice([0.5, 1.0, 3.0]), "delta": rnd.choice([1e-6, 1e-9])},
            **config,
        )
        for i, config in enumerate(CONFIGS)
    ]
    holds: list[str] = []
    for _ in range(120):
        ds = rnd.choice(datasets)
        url = f"/v1/datasets/{ds['id']}"
        m = _mechanism(rnd, ds["filter"] == "gdp")
        op = rnd.choices(["charge", "reserve", "commit", "release"], [5, 2, 2, 1])[0]
        if op == "charge":
            dry = client.post(f"{url}/charges", params={"dry_run": "true"}, json={"mechanism": m})
            real = client.post(f"{url}/charges", json={"mechanism": m})
            assert dry.status_code < 500 and real.status_code < 500, (m, real.text)
            if real.status_code == 422:
                assert dry.status_code == 422
                continue
            assert (dry.status_code, real.status_code) in ((200, 201), (409, 409)), m
            if real.status_code == 201:
                spent, would = real.json()["spent"], dry.json()["would_spend"]
                assert spent["epsilon"] == pytest.approx(would["epsilon"], rel=1e-9)
                assert spent["epsilon"] <= ds["budget"]["epsilon"] * (1 + 1e-12)
        elif op == "reserve":
            r = client.post(f"{url}/reservations", json={"mechanism": m, "ttl_seconds": 3600})
            assert r.status_code < 500, (m, r.text)
            if r.status_code == 201:
                holds.append(r.json()["id"])
        elif holds:
            rid = holds.pop(rnd.randrange(len(holds)))
            if op == "commit":
                r = client.post(f"/v1/reservations/{rid}/commit")
            else:
                r = client.delete(f"/v1/reservations/{rid}")
            assert r.status_code < 300, (op, r.text)
    report = client.post("/v1/admin/verify").json()
    assert report["ok"], [d for d in report["datasets"] if not d["ok"]]
    before = {d["id"]: client.get(f"/v1/datasets/{d['id']}/budget").json() for d in datasets}
    assert client.post("/v1/admin/verify", params={"rebuild": "true"}).status_code == 200
    for d in datasets:
        after = client.get(f"/v1/datasets/{d['id']}/budget").json()
        assert after["entries"] == before[d["id"]]["entries"]
        assert after["spent"]["epsilon"] == pytest.approx(
            before[d["id"]]["spent"]["epsilon"], rel=1e-2
        )
    assert sum(b["entries"] for b in before.values()) > 20  # the sequence did charge
