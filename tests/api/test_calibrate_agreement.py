"""``/calibrate`` and ``/charges`` agree: the calibrated mechanism, charged right away, is admitted,
and it is not needlessly loose (1 % further toward more privacy loss is refused). Cases a
seeded random search of calibrations (every kind, every filter, holds, budget structures, extreme
parameters) found where they did not."""

from __future__ import annotations

import re
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.services import admission
from app.services.calibrate import MOST_BINDING_BLOCKS
from tests.conftest import dry_run_status, new_dataset


@pytest.fixture
def db_url(sqlite_url: str) -> str:
    """SQLite only (``client`` builds on it): what is tested here is that calibration and
    admission agree, both computed from the state the services read the same way on either
    database (tests/api run those on both)."""
    return sqlite_url


@pytest.mark.parametrize("sensitivity", [1e-5, 1e7])
def test_dp_sgd_sigma_for_a_clipping_norm_far_from_one(
    client: TestClient, sensitivity: float
) -> None:
    """The noise multiplier search probed its whole range (1e-3 to 1e6) times the clipping
    norm, past the range of sigma itself (1e-6 to 1e12): with a clipping norm of 1e-5 or 1e7
    every calibration was a 422 about a sigma nobody gave ("got 1e-08", "got 1e+13"), while a
    charge of sigma = 1.44 x the norm is admitted. The search now stays within the noise
    multipliers whose sigma is valid."""
    ds = new_dataset(client, budget={"epsilon": 1.0, "delta": 1e-6}, adaptive=False)["id"]
    url = f"/v1/datasets/{ds}/calibrate"
    base = {"mechanism": "subsampled_gaussian", "sample_rate": 0.01, "steps": 10}
    unit = client.get(url, params=base)
    assert unit.status_code == 200, unit.text
    r = client.get(url, params={**base, "sensitivity": sensitivity})
    assert r.status_code == 200, r.text
    m = r.json()["mechanism"]
    assert m["sensitivity"] == sensitivity
    assert m["sigma"] / sensitivity == pytest.approx(unit.json()["value"], rel=1e-6)
    assert dry_run_status(client, ds, m) == 200
    assert dry_run_status(client, ds, {**m, "sigma": m["sigma"] * 0.99}) == 409


def test_dp_sgd_sigma_when_even_the_largest_sigma_does_not_fit(client: TestClient) -> None:
    """With a clipping norm of 1e12 the largest sigma (1e12) is a noise multiplier of 1, too
    little for this budget: a 409 saying no sigma fits, naming the least costly invocation
    (refused by a charge too), not a 422 about a sigma of 1e18 that nobody asked for."""
    ds = new_dataset(client, budget={"epsilon": 1.0, "delta": 1e-6}, adaptive=False)["id"]
    r = client.get(
        f"/v1/datasets/{ds}/calibrate",
        params={
            "mechanism": "subsampled_gaussian",
            "sample_rate": 0.01,
            "steps": 10,
            "sensitivity": 1e12,
        },
    )
    assert r.status_code == 409, r.text
    problem = r.json()
    assert "no value of sigma" in problem["detail"]
    m = problem["requested"]["mechanism"]
    assert m["sigma"] == 1e12
    assert dry_run_status(client, ds, m) == 409


ZERO_CASES = [
    ({"accounting": "rdp", "adaptive": False}, "approx_dp", {"delta": 1e-7}, 200),
    ({"accounting": "rdp", "adaptive": False}, "zcdp", {"delta": 1e-7}, 200),
    ({"accounting": "pld", "adaptive": False}, "approx_dp", {"delta": 1e-7}, 200),
    # a zcdp of rho 0 and nothing else reads no data: no answer to what fits
    ({"accounting": "rdp", "adaptive": True}, "zcdp", {}, 409),
]


@pytest.mark.parametrize(
    ("settings", "kind", "fixed", "status"),
    ZERO_CASES,
    ids=["rdp-approx_dp", "rdp-zcdp", "pld-approx_dp", "rdp_fixed_orders-zcdp"],
)
def test_a_parameter_whose_least_value_is_zero_answers_zero_when_only_zero_fits(
    client: TestClient, settings: dict[str, Any], kind: str, fixed: dict[str, Any], status: int
) -> None:
    """approx_dp's epsilon and zcdp's rho may be 0 (a mechanism of its delta alone). On a
    ledger at its budget (a Laplace of the whole epsilon: the pure-DP sum meets it) a charge of
    0 is admitted, but the search started at 1e-12 and answered 409 "no epsilon fits". When
    nothing above 0 fits and 0 does, the answer is 0 (on a pld dataset, whose PLD search moves
    on from the answer, at least 0, and no division by it); the 409, when 0 does not fit
    either or costs nothing, names 0 or the least positive value."""
    ds = new_dataset(client, budget={"epsilon": 1.0, "delta": 1e-6}, **settings)["id"]
    laplace = {"mechanism": "laplace", "epsilon": 1.0}
    assert client.post(f"/v1/datasets/{ds}/charges", json={"mechanism": laplace}).status_code == 201
    r = client.get(f"/v1/datasets/{ds}/calibrate", params={"mechanism": kind, **fixed})
    assert r.status_code == status, r.text
    if status == 409:
        return
    m = r.json()["mechanism"]
    assert dry_run_status(client, ds, m) == 200
    if settings["accounting"] != "pld":
        assert r.json()["value"] == 0.0
    r = client.post(f"/v1/datasets/{ds}/charges", json={"mechanism": m})
    assert r.status_code == 201, r.text
    # the budget's delta left: 1e-6 - 1e-7 per charge; approx_dp(0, 1e-6) no longer fits
    r = client.get(f"/v1/datasets/{ds}/calibrate", params={"mechanism": kind, "delta": 1e-6})
    assert r.status_code == 409, r.text
    assert "= 0," in r.json()["detail"]


_STATED = re.compile(r"would reach ([0-9.e+-]+),? .*?above the (?:budget|.*?bound) ([0-9.e+-]+)")


@pytest.mark.parametrize(
    ("settings", "kind"),
    [
        ({"accounting": "rdp", "adaptive": False}, "laplace"),
        ({"accounting": "rdp", "adaptive": True}, "laplace"),
        ({"accounting": "zcdp", "adaptive": False}, "gaussian"),
    ],
    ids=["rdp", "rdp_fixed_orders", "zcdp"],
)
def test_nothing_fits_says_a_figure_above_the_budget(
    client: TestClient, settings: dict[str, Any], kind: str
) -> None:
    """On a ledger at its budget, calibrate's 409 quoted the least costly invocation's refusal
    to 6 figures: "epsilon at delta=1e-06 would reach 1 (...), above the budget 1". The figure
    compared is printed with as many digits as it takes to differ from the limit (a charge's
    409 says the same)."""
    ds = new_dataset(client, budget={"epsilon": 1.0, "delta": 1e-6}, **settings)["id"]
    url = f"/v1/datasets/{ds}"
    first = client.get(f"{url}/calibrate", params={"mechanism": kind}).json()
    assert client.post(f"{url}/charges", json={"mechanism": first["mechanism"]}).status_code == 201
    for _ in range(3):  # what is left: nothing, or slivers of it
        r = client.get(f"{url}/calibrate", params={"mechanism": "laplace"})
        if r.status_code != 200:
            break
        assert (
            client.post(f"{url}/charges", json={"mechanism": r.json()["mechanism"]}).status_code
            == 201
        )
    assert r.status_code == 409, r.text
    stated = _STATED.findall(r.json()["detail"])
    assert stated, r.json()["detail"]
    for reached, limit in stated:
        assert float(reached) > float(limit), r.json()["detail"]


def _two_blocks_no_one_dominates(client: TestClient, adaptive: bool) -> str:
    """Day 1 holds a Gaussian (its RDP curve is the larger at high orders, and it has no pure-DP
    bound), day 2 a Laplace of epsilon 0.6 (the larger at low orders; its pure-DP sum is what
    leaves room on day 2): neither block has spent the most at every order."""
    ds = new_dataset(
        client,
        name=f"split-{adaptive}",
        budget={"epsilon": 1.0, "delta": 1e-6},
        adaptive=adaptive,
        partition={"unit": "day"},
    )["id"]
    for day, m in (
        ("2026-11-01", {"mechanism": "gaussian", "sigma": 6.0}),
        ("2026-11-02", {"mechanism": "laplace", "epsilon": 0.6}),
    ):
        r = client.post(
            f"/v1/datasets/{ds}/charges", json={"mechanism": m, "blocks": {"from": day, "to": day}}
        )
        assert r.status_code == 201, r.text
    return str(ds)


SPAN = {"from": "2026-11-01", "to": "2026-11-02"}


@pytest.mark.parametrize("adaptive", [False, True], ids=["rdp", "rdp_fixed_orders"])
@pytest.mark.parametrize("kind", ["laplace", "randomized_response"])
def test_blocks_where_no_block_dominates_are_calibrated_block_by_block(
    client: TestClient, adaptive: bool, kind: str
) -> None:
    """The blocks of a range were searched through their envelope (at every order the largest
    of their curves, the pure-DP bound the largest too, so infinite): an answer 34 % below what
    admission takes (epsilon 0.2115, a charge of 0.2842 admitted) on the rdp filter, and on
    rdp_fixed_orders a 409 "no epsilon fits" while a charge of 0.28 over both days is admitted.
    The few blocks no other block dominates are now each a limit of their own: the answer is
    admitted and 1 % more is refused."""
    ds = _two_blocks_no_one_dominates(client, adaptive)
    r = client.get(
        f"/v1/datasets/{ds}/calibrate",
        params={"mechanism": kind, "block_from": SPAN["from"], "block_to": SPAN["to"]},
    )
    assert r.status_code == 200, r.text
    m = r.json()["mechanism"]
    assert dry_run_status(client, ds, m, blocks=SPAN) == 200
    assert dry_run_status(client, ds, {**m, "epsilon": m["epsilon"] * 1.01}, blocks=SPAN) == 409
    charged = client.post(f"/v1/datasets/{ds}/charges", json={"mechanism": m, "blocks": SPAN})
    assert charged.status_code == 201, charged.text


def test_many_blocks_none_dominating_are_searched_by_admission(client: TestClient) -> None:
    """More blocks than are searched one by one (``MOST_BINDING_BLOCKS``) none of which
        dominates another (day i: a Laplace growing with i, a Gaussian shrinking), and a day with a
        Laplace of 0.6 alone: their envelope (no pure-DP bound) fits nothing on the default filter,
        a 409, yet admission takes a Laplace of 0.36 over the range. From the least costly
        invocation, admission checks move the answer on (a bisection of the range): admitted, and
    1 % more is refused."""
    ds = new_dataset(
        client, name="many", budget={"epsilon": 1.0, "delta": 1e-6}, partition={"unit": "day"}
    )["id"]
    days = MOST_BINDING_BLOCKS + 2
    charges = [
        (i, m)
        for i in range(1, days + 1)
        for m in (
            {"mechanism": "laplace", "epsilon": 0.01 * i},
            {"mechanism": "gaussian", "sigma": 20.0 + 2.0 * i},
        )
    ]
    charges.append((days + 1, {"mechanism": "laplace", "epsilon": 0.6}))
    for i, m in charges:
        day = {"from": f"2026-11-{i:02d}", "to": f"2026-11-{i:02d}"}
        r = client.post(f"/v1/datasets/{ds}/charges", json={"mechanism": m, "blocks": day})
        assert r.status_code == 201, r.text
    span = {"from": "2026-11-01", "to": f"2026-11-{days + 1:02d}"}
    r = client.get(
        f"/v1/datasets/{ds}/calibrate",
        params={"mechanism": "laplace", "block_from": span["from"], "block_to": span["to"]},
    )
    assert r.status_code == 200, r.text
    m = r.json()["mechanism"]
    assert m["epsilon"] > 0.36
    assert dry_run_status(client, ds, {**m, "epsilon": m["epsilon"] * 1.01}, blocks=span) == 409
    charged = client.post(f"/v1/datasets/{ds}/charges", json={"mechanism": m, "blocks": span})
    assert charged.status_code == 201, charged.text


@pytest.mark.parametrize(
    ("budget", "kind", "fixed"),
    [
        ({"epsilon": 1e-5, "delta": 1e-8}, "zcdp", {"count": 10}),
        ({"epsilon": 1e-13, "delta": 1e-8}, "approx_dp", {"delta": 9.99999999e-9}),
    ],
    ids=["zcdp-rho", "approx_dp-epsilon"],
)
def test_a_parameter_from_zero_is_searched_below_the_usual_least_value(
    client: TestClient, budget: dict[str, float], kind: str, fixed: dict[str, Any]
) -> None:
    """The search of zcdp's rho and approx_dp's epsilon started at 1e-12: under a budget
    epsilon of 1e-5 ten zCDP charges of rho 6.5e-13 fit (and an approx_dp of epsilon 1e-13
    whose delta leaves 1e-17 of the budget's under a budget epsilon of 1e-13), but calibrate
    answered 409 (or, with only 0 tried below 1e-12, 0, found by the random search). Below
    1e-12 the search goes on, down to 1e-300."""
    ds = new_dataset(client, budget=budget, accounting="rdp", adaptive=False)["id"]
    r = client.get(f"/v1/datasets/{ds}/calibrate", params={"mechanism": kind, **fixed})
    assert r.status_code == 200, r.text
    answer = r.json()
    m, p = answer["mechanism"], answer["parameter"]
    assert 0.0 < answer["value"] < 1e-12
    assert dry_run_status(client, ds, m) == 200
    assert dry_run_status(client, ds, {**m, p: m[p] * 1.01}) == 409


def test_an_envelope_answer_within_one_percent_costs_one_admission_check(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Beyond ``MOST_BINDING_BLOCKS`` non-dominated blocks the envelope's answer is checked
    against admission one step of 1 % on: refused there, it stands (one check, a charge's dry
    run over the range: 30 blocks), instead of 16 checks bisecting inside that 1 %."""
    ds = new_dataset(
        client, name="thirty", budget={"epsilon": 2.0, "delta": 1e-6}, partition={"unit": "day"}
    )["id"]
    days = 30
    for i in range(days):
        day = {"from": f"2026-11-{i + 1:02d}", "to": f"2026-11-{i + 1:02d}"}
        for m in (
            {"mechanism": "laplace", "epsilon": 0.004 * i + 0.001},
            {"mechanism": "gaussian", "sigma": 20.0 + 1.0 * i},
        ):
            r = client.post(f"/v1/datasets/{ds}/charges", json={"mechanism": m, "blocks": day})
            assert r.status_code == 201, r.text
    checks = []
    decide = admission.decide
    monkeypatch.setattr(admission, "decide", lambda st, ask: checks.append(1) or decide(st, ask))
    span = {"from": "2026-11-01", "to": f"2026-11-{days:02d}"}
    r = client.get(
        f"/v1/datasets/{ds}/calibrate",
        params={"mechanism": "laplace", "block_from": span["from"], "block_to": span["to"]},
    )
    assert r.status_code == 200, r.text
    assert len(checks) == 1
    monkeypatch.undo()
    m = r.json()["mechanism"]
    assert dry_run_status(client, ds, m, blocks=span) == 200
    assert dry_run_status(client, ds, {**m, "epsilon": m["epsilon"] * 1.01}, blocks=span) == 409
