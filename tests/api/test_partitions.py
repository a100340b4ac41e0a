"""Time-partitioned datasets (issue 15): the budget applies to each block; a charge names its
block range and is admitted in every block or none; an optional lifetime budget caps all."""

from __future__ import annotations

import math
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.accounting.curve import PrivacyCurve
from app.accounting.filters import Budget, Filter, FilterKind
from app.accounting.mechanisms import mechanism_from_dict
from app.services.blocks import MAX_SPAN
from tests.conftest import expire_active_holds, new_allocation, new_dataset

LAPLACE = {"mechanism": "laplace", "epsilon": 0.4}


def _partitioned(client: TestClient, unit: str = "day", **fields: Any) -> dict[str, Any]:
    return new_dataset(
        client,
        name=f"clicks-{unit}",
        budget={"epsilon": 1.0, "delta": 1e-6},
        adaptive=False,
        partition={"unit": unit},
        **fields,
    )


def _charge(client: TestClient, ds: str, first: str, last: str, **body: Any) -> Any:
    return client.post(
        f"/v1/datasets/{ds}/charges",
        json={"mechanism": LAPLACE, "blocks": {"from": first, "to": last}, **body},
    )


def _blocks(client: TestClient, ds: str, first: str, last: str, **params: Any) -> list[Any]:
    r = client.get(f"/v1/datasets/{ds}/blocks", params={"from": first, "to": last, **params})
    assert r.status_code == 200, r.text
    return list(r.json()["blocks"])


def _snapshot(client: TestClient, ds: str) -> Any:
    return (
        client.get(f"/v1/datasets/{ds}/budget").json(),
        client.get(f"/v1/datasets/{ds}/ledger").json()["entries"],
        _blocks(client, ds, "2026-11-01", "2026-11-30"),
    )


def test_bad_ranges_get_422_and_change_nothing(client: TestClient) -> None:
    ds = _partitioned(client)["id"]
    plain = new_dataset(client, name="plain")["id"]
    assert _charge(client, ds, "2026-11-20", "2026-11-21").status_code == 201
    before = _snapshot(client, ds)
    bad = [
        ("2026-11-22", "2026-11-21"),  # reversed
        ("2026-11-31", "2026-12-01"),  # no such day
        ("2026-W48", "2026-W48"),  # a week key on a daily dataset
        ("2026-11-1", "2026-11-02"),  # not zero-padded
        ("2026-01-01", "2027-01-02"),  # 367 days: beyond the maximum span
    ]
    for first, last in bad:
        r = _charge(client, ds, first, last)
        assert r.status_code == 422, (first, last, r.text)
        assert r.json()["detail"]
    r = client.post(f"/v1/datasets/{ds}/charges", json={"mechanism": LAPLACE})
    assert r.status_code == 422 and "partitioned by day" in r.json()["detail"]
    r = client.post(
        f"/v1/datasets/{ds}/charges",
        json={"mechanism": LAPLACE, "blocks": {"from": "2026-11-01"}},
    )
    assert r.status_code == 422
    assert _snapshot(client, ds) == before
    r = _charge(client, plain, "2026-11-20", "2026-11-21")
    assert r.status_code == 422 and "not partitioned" in r.json()["detail"]
    assert client.get(f"/v1/datasets/{plain}/budget").json()["entries"] == 0
    # a lifetime budget without a partition, a partition on a pld dataset: 422
    r = client.post(
        "/v1/datasets",
        json={
            "name": "x",
            "budget": {"epsilon": 1.0, "delta": 1e-6},
            "lifetime_budget": {"epsilon": 2.0, "delta": 1e-6},
        },
    )
    assert r.status_code == 422
    r = client.post(
        "/v1/datasets",
        json={
            "name": "y",
            "budget": {"epsilon": 1.0, "delta": 1e-6},
            "accounting": "pld",
            "adaptive": False,
            "partition": {"unit": "day"},
        },
    )
    assert r.status_code == 422


@pytest.mark.parametrize(
    ("unit", "key"),
    [
        ("month", "\uff12\uff10\uff12\uff16-11"),  # fullwidth digits
        ("week", "\u0662\u0660\u0662\u0666-W48"),  # Arabic-Indic digits
        ("day", "\uff12\uff10\uff12\uff16-11-23"),
    ],
)
def test_block_keys_take_ascii_digits_only(client: TestClient, unit: str, key: str) -> None:
    """Python's \\d and int() take any script's digits: week and month keys so written were
    charged to the ASCII block (and an idempotent retry spelled the other way was 'another
    request'), where docs/budgets.md promises a 422 for a malformed key."""
    ds = _partitioned(client, unit)["id"]
    r = _charge(client, ds, key, key)
    assert r.status_code == 422, r.text
    assert client.get(f"/v1/datasets/{ds}/budget").json()["entries"] == 0
    r = client.get(f"/v1/datasets/{ds}/blocks", params={"from": key, "to": key})
    assert r.status_code == 422, r.text


def test_blocks_held_and_released_are_not_charged(client: TestClient) -> None:
    ds = _partitioned(client)["id"]
    hold = client.post(
        f"/v1/datasets/{ds}/reservations",
        json={"mechanism": LAPLACE, "blocks": {"from": "2026-11-01", "to": "2026-11-30"}},
    )
    assert hold.status_code == 201, hold.text
    assert client.delete(f"/v1/reservations/{hold.json()['id']}").status_code == 200
    assert _charge(client, ds, "2026-11-05", "2026-11-06").status_code == 201
    blocks = client.get(f"/v1/datasets/{ds}/budget").json()["blocks"]
    assert blocks["charged_blocks"] == 2  # was 30: every block row the hold had made


@pytest.mark.parametrize(
    "unit,first,last,n",
    [
        ("day", "2026-11-23", "2026-11-29", 7),
        ("week", "2026-W52", "2027-W02", 4),
        ("month", "2026-11", "2027-02", 4),
    ],
)
def test_keys_per_unit_and_max_span(
    client: TestClient, unit: str, first: str, last: str, n: int
) -> None:
    ds = _partitioned(client, unit)
    assert ds["partition"] == {"unit": unit, "max_span": MAX_SPAN[unit]}
    r = _charge(client, ds["id"], first, last)
    assert r.status_code == 201, r.text
    charged = [b["block"] for b in r.json()["blocks"]]
    assert len(charged) == n and charged[0] == first and charged[-1] == last
    assert charged == sorted(charged)
    assert r.json()["entry"]["blocks"] == {"from": first, "to": last}


def test_all_blocks_or_none(client: TestClient) -> None:
    """Block 23 is nearly full: a range that includes it is refused in every block, and the
    refusal lists it in blocks_exceeded."""
    ds = _partitioned(client)["id"]
    flt = Filter.create(FilterKind.RDP, Budget(1.0, 1e-6))
    curve = mechanism_from_dict(LAPLACE).curve()
    total = PrivacyCurve.zero()
    while flt.admits(total + curve):
        assert _charge(client, ds, "2026-11-23", "2026-11-23").status_code == 201
        total = total + curve
    before = _snapshot(client, ds)
    r = _charge(client, ds, "2026-11-20", "2026-11-25")
    assert r.status_code == 409, r.text
    problem = r.json()
    assert problem["limit"] == "dataset"
    assert problem["blocks_exceeded"] == ["2026-11-23"]
    assert _snapshot(client, ds) == before
    rows = {b["block"]: b for b in _blocks(client, ds, "2026-11-20", "2026-11-25")}
    assert rows["2026-11-20"]["spent"]["epsilon"] == 0.0 and rows["2026-11-20"]["entries"] == 0
    assert rows["2026-11-23"]["spent"]["epsilon"] == pytest.approx(flt.spend(total).epsilon)
    # the blocks beside it still take charges
    assert _charge(client, ds, "2026-11-24", "2026-11-25").status_code == 201
    view = client.get(f"/v1/datasets/{ds}/budget").json()
    assert view["blocks"]["most_spent"]["block"] == "2026-11-23"
    assert view["blocks"]["charged_blocks"] == 3
    assert view["blocks"]["exhausted_blocks"] == sum(
        b["exhausted"] for b in _blocks(client, ds, "2026-11-01", "2026-11-30")
    )
    assert client.post("/v1/admin/verify").json()["ok"] is True


def test_lifetime_budget_caps_the_composition(client: TestClient) -> None:
    ds = _partitioned(client, lifetime_budget={"epsilon": 1.5, "delta": 1e-6})
    assert ds["lifetime_budget"] == {"epsilon": 1.5, "delta": 1e-6}
    life = Filter.create(FilterKind.RDP, Budget(1.5, 1e-6))
    curve = mechanism_from_dict(LAPLACE).curve()
    total = PrivacyCurve.zero()
    day = 1
    while life.admits(total + curve):  # a fresh day each time: only the lifetime can refuse
        r = _charge(client, ds["id"], f"2026-11-{day:02d}", f"2026-11-{day:02d}")
        assert r.status_code == 201, r.text
        total, day = total + curve, day + 1
    r = _charge(client, ds["id"], f"2026-11-{day:02d}", f"2026-11-{day:02d}")
    assert r.status_code == 409 and r.json()["limit"] == "lifetime", r.text
    assert r.json()["blocks_exceeded"] == []
    view = client.get(f"/v1/datasets/{ds['id']}/budget").json()
    assert view["lifetime"]["budget"] == {"epsilon": 1.5, "delta": 1e-6}
    assert view["lifetime"]["spent"]["epsilon"] == pytest.approx(life.spend(total).epsilon)
    assert view["lifetime"]["spent"]["epsilon"] <= 1.5


def test_reservations_hold_blocks_and_allocations(client: TestClient) -> None:
    ds = _partitioned(client)["id"]
    new_allocation(client, ds, "team-a", 0.5)
    body = {"mechanism": LAPLACE, "blocks": {"from": "2026-11-01", "to": "2026-11-03"}}
    hold = client.post(f"/v1/datasets/{ds}/reservations", json={**body, "allocation": "team-a"})
    assert hold.status_code == 201, hold.text
    assert hold.json()["blocks"] == {"from": "2026-11-01", "to": "2026-11-03"}
    # team-a's 0.5 per block is held (0.4): another 0.4 in an overlapping block is refused
    r = _charge(client, ds, "2026-11-03", "2026-11-04", allocation="team-a")
    assert r.status_code == 409 and r.json()["limit"] == "allocation"
    assert r.json()["allocation_blocks_exceeded"] == ["2026-11-03"]
    held = _blocks(client, ds, "2026-11-01", "2026-11-04")
    assert [b["reserved"]["count"] if b["reserved"] else 0 for b in held] == [1, 1, 1, 0]
    dry = client.post(
        f"/v1/datasets/{ds}/charges",
        params={"dry_run": "true"},
        json={**body, "allocation": "team-a"},
    )
    assert dry.status_code == 409 and dry.json()["dry_run"] is True
    assert client.delete(f"/v1/reservations/{hold.json()['id']}").status_code == 200
    assert all(b["reserved"] is None for b in _blocks(client, ds, "2026-11-01", "2026-11-04"))
    r = _charge(client, ds, "2026-11-03", "2026-11-04", allocation="team-a")
    assert r.status_code == 201, r.text
    shares = _blocks(client, ds, "2026-11-02", "2026-11-04", allocation="team-a")
    assert [s["entries"] for s in shares] == [0, 1, 1]
    alloc = client.get(f"/v1/datasets/{ds}/allocations/team-a").json()
    assert alloc["most_spent_block"] == "2026-11-03"
    assert client.post("/v1/admin/verify").json()["ok"] is True
    assert (
        client.get(
            f"/v1/datasets/{ds}/blocks",
            params={"from": "2026-11-01", "to": "2026-11-02", "allocation": "nobody"},
        ).status_code
        == 404
    )


def test_a_lifetime_budget_below_the_block_budget_admits_gaussians(client: TestClient) -> None:
    """The lifetime budget's fixed-order filter is chosen for the lifetime budget: at the block
    budget's order (20 for epsilon 1, delta 1e-6) a lifetime epsilon of 0.3 had a negative
    threshold and refused every Gaussian charge."""
    ds = new_dataset(
        client,
        name="clicks-adaptive",
        budget={"epsilon": 1.0, "delta": 1e-6},
        partition={"unit": "day"},
        lifetime_budget={"epsilon": 0.3, "delta": 1e-6},
    )["id"]
    r = client.post(
        f"/v1/datasets/{ds}/charges",
        json={
            "mechanism": {"mechanism": "gaussian", "sigma": 40.0},
            "blocks": {"from": "2026-11-20", "to": "2026-11-20"},
        },
    )
    assert r.status_code == 201, r.text


def test_patch_sets_and_changes_the_lifetime_budget(client: TestClient) -> None:
    ds = _partitioned(client)["id"]
    path = f"/v1/datasets/{ds}"
    # a new lifetime budget needs both numbers; a dataset that is not partitioned has none
    r = client.patch(path, json={"lifetime_budget": {"epsilon": 1.0}})
    assert r.status_code == 422 and "both" in r.json()["detail"], r.text
    plain = new_dataset(client, name="plain")["id"]
    r = client.patch(
        f"/v1/datasets/{plain}", json={"lifetime_budget": {"epsilon": 1.0, "delta": 1e-6}}
    )
    assert r.status_code == 422 and "partitioned" in r.json()["detail"], r.text
    # set: the cap applies to the next charges (days 1 and 2 each fit their block)
    r = client.patch(path, json={"lifetime_budget": {"epsilon": 0.6, "delta": 1e-6}})
    assert r.status_code == 200 and r.json()["lifetime_budget"] == {"epsilon": 0.6, "delta": 1e-6}
    assert _charge(client, ds, "2026-11-01", "2026-11-01").status_code == 201
    refused = _charge(client, ds, "2026-11-02", "2026-11-02")
    assert refused.status_code == 409 and refused.json()["limit"] == "lifetime", refused.text
    # raised (epsilon only; delta kept): the same charge fits, and the change is audited
    r = client.patch(path, json={"lifetime_budget": {"epsilon": 2.0}})
    assert r.status_code == 200 and r.json()["lifetime_budget"] == {"epsilon": 2.0, "delta": 1e-6}
    assert _charge(client, ds, "2026-11-02", "2026-11-02").status_code == 201
    events = client.get("/v1/audit", params={"dataset_id": ds}).json()["events"]
    changes = [e["details"]["changes"] for e in events if e["action"] == "dataset.changed"]
    assert {"old": {"epsilon": 0.6, "delta": 1e-6}, "new": {"epsilon": 2.0, "delta": 1e-6}} in [
        c.get("lifetime_budget") for c in changes
    ]
    view = client.get(f"/v1/datasets/{ds}/budget").json()
    assert view["lifetime"]["budget"] == {"epsilon": 2.0, "delta": 1e-6}


def test_most_spent_block_counts_active_holds(client: TestClient) -> None:
    """team-a (0.5 per block) has 0.2 charged on 11-20 and a 0.45 hold on 11-21: its view
    picked 11-20 by committed spend and reported 0.3 remaining, where a dry run of 0.29 on
    11-21 is refused (audit h2, F3). The block left with the least after its holds is the one
    reported, for the allocation and for /budget's most_spent."""
    ds = _partitioned(client)["id"]
    new_allocation(client, ds, "team-a", 0.5)
    lap = lambda e: {"mechanism": "laplace", "epsilon": e}  # noqa: E731
    day = lambda d: {"from": f"2026-11-{d}", "to": f"2026-11-{d}"}  # noqa: E731
    r = client.post(
        f"/v1/datasets/{ds}/charges",
        json={"mechanism": lap(0.2), "allocation": "team-a", "blocks": day(20)},
    )
    assert r.status_code == 201, r.text
    r = client.post(
        f"/v1/datasets/{ds}/reservations",
        json={"mechanism": lap(0.45), "allocation": "team-a", "blocks": day(21)},
    )
    assert r.status_code == 201, r.text
    view = client.get(f"/v1/datasets/{ds}/allocations/team-a").json()
    shares = _blocks(client, ds, "2026-11-20", "2026-11-21", allocation="team-a")
    least = min(shares, key=lambda b: b["remaining"]["epsilon"])
    assert least["block"] == "2026-11-21"
    assert view["most_spent_block"] == "2026-11-21"
    assert view["remaining"] == least["remaining"]
    # what the view reports as left is admitted; a little more is not
    remaining = view["remaining"]["epsilon"]
    for eps, admitted in ((remaining * 0.99, True), (remaining * 1.01 + 1e-9, False)):
        dry = client.post(
            f"/v1/datasets/{ds}/charges",
            params={"dry_run": "true"},
            json={"mechanism": lap(eps), "allocation": "team-a", "blocks": day(21)},
        )
        assert dry.status_code == (200 if admitted else 409), (eps, dry.text)
    # the dataset's own most-spent block counts the hold as well (0.45 > 0.2)
    top = client.get(f"/v1/datasets/{ds}/budget").json()["blocks"]["most_spent"]
    assert top["block"] == "2026-11-21"


def test_most_spent_block_of_a_rho_filter_is_the_one_with_least_rho_left(
    client: TestClient,
) -> None:
    """A zCDP dataset (adaptive: false) admits by rho, but converts a Gaussian-only block with
    the exact Gaussian conversion: a Gaussian block of rho 0.4 reads less epsilon than a Laplace
    block of less rho. The views picked the Laplace block by epsilon and reported its rho left,
    more than the Gaussian block has: a charge of that rho was refused there (audit blocks46)."""
    ds = new_dataset(
        client,
        budget={"epsilon": 10.0, "delta": 1e-6},
        accounting="zcdp",
        adaptive=False,
        partition={"unit": "day"},
    )["id"]
    new_allocation(client, ds, "team-a", 10.0)
    gaussian_rho = 0.4  # sigma = 1 / sqrt(2 rho), sensitivity 1: rho = 1 / (2 sigma^2)
    sigma = (2 * gaussian_rho) ** -0.5
    gaussian_day, laplace_day = "2026-11-20", "2026-11-21"
    for mechanism, d in (
        ({"mechanism": "gaussian", "sigma": sigma}, gaussian_day),
        ({"mechanism": "laplace", "epsilon": 1.0}, laplace_day),
    ):
        r = _charge(client, ds, d, d, mechanism=mechanism, allocation="team-a")
        assert r.status_code == 201, r.text
    by_day = {b["block"]: b for b in _blocks(client, ds, gaussian_day, laplace_day)}
    gauss, lap = by_day[gaussian_day], by_day[laplace_day]
    assert gauss["spent"]["rho"] == pytest.approx(gaussian_rho, rel=1e-12)
    # the case: the Gaussian block has more rho but reads less epsilon
    assert lap["spent"]["rho"] < gauss["spent"]["rho"]
    assert lap["spent"]["epsilon"] > gauss["spent"]["epsilon"]

    top = client.get(f"/v1/datasets/{ds}/budget").json()["blocks"]["most_spent"]
    team = client.get(f"/v1/datasets/{ds}/allocations/team-a").json()
    assert top["block"] == gaussian_day
    assert team["most_spent_block"] == gaussian_day
    for view in (top["remaining"], team["remaining"]):
        assert view == gauss["remaining"]
    # what the views report as left is admitted in every block; a little more is not in one
    left = top["remaining"]["rho"]
    for rho, admitted in ((left * 0.999, True), (left * 1.001, False)):
        for d in (gaussian_day, laplace_day):
            dry = client.post(
                f"/v1/datasets/{ds}/charges",
                params={"dry_run": "true"},
                json={
                    "mechanism": {"mechanism": "zcdp", "rho": rho},
                    "allocation": "team-a",
                    "blocks": {"from": d, "to": d},
                },
            )
            expected = 200 if admitted or d == laplace_day else 409
            assert dry.status_code == expected, (rho, d, dry.text)


def test_allocations_never_take_the_lifetime_past_its_budget(
    client: TestClient, db_url: str
) -> None:
    """Allocations of a partitioned dataset have a per-block budget and no lifetime budget of
    their own, but every charge through them (committed hold, expired hold, plain charge) is
    still admitted against the dataset's lifetime budget: two teams charging disjoint days
    never compose past it. Oracle: Laplace entries compose to at most the sum of their
    epsilons (pure DP), and a fourth 0.4 would take that sum past 1.5 (audit blocks46)."""
    ds = _partitioned(client, lifetime_budget={"epsilon": 1.5, "delta": 1e-6})["id"]
    for team in ("team-a", "team-b"):
        new_allocation(client, ds, team, 1.0)
    day = lambda d: {"from": f"2026-11-{d:02d}", "to": f"2026-11-{d:02d}"}  # noqa: E731
    held = client.post(
        f"/v1/datasets/{ds}/reservations",
        json={"mechanism": LAPLACE, "allocation": "team-a", "blocks": day(1)},
    )
    assert held.status_code == 201, held.text
    expiring = client.post(
        f"/v1/datasets/{ds}/reservations",
        json={"mechanism": LAPLACE, "allocation": "team-b", "blocks": day(2)},
    )
    assert expiring.status_code == 201, expiring.text
    committed = client.post(f"/v1/reservations/{held.json()['id']}/commit")
    assert committed.status_code == 200, committed.text
    expire_active_holds(db_url)  # the second hold is charged, fail closed
    # a third team-a charge fits (1.2); then the lifetime refuses 0.4 through either team, on
    # fresh blocks; then small charges until the lifetime refuses them too
    assert _charge(client, ds, "2026-11-03", "2026-11-03", allocation="team-a").status_code == 201
    for d, team in ((4, "team-b"), (5, "team-a")):
        r = _charge(client, ds, day(d)["from"], day(d)["to"], allocation=team)
        assert r.status_code == 409 and r.json()["limit"] == "lifetime", r.text
    small = {"mechanism": "laplace", "epsilon": 0.05}
    for d in range(6, 20):
        team = ("team-a", "team-b")[d % 2]
        r = _charge(client, ds, day(d)["from"], day(d)["to"], allocation=team, mechanism=small)
        if r.status_code == 409:
            assert r.json()["limit"] == "lifetime", r.text
            break
        assert r.status_code == 201, r.text
    else:
        raise AssertionError("the lifetime budget never refused")
    epsilons = [e["mechanism"]["epsilon"] for e in _ledger(client, ds)]
    assert _composed_laplace(epsilons, 1e-6) <= 1.5 * (1 + 1e-9)
    assert client.get(f"/v1/datasets/{ds}/budget").json()["lifetime"]["spent"]["epsilon"] <= 1.5


def _ledger(client: TestClient, ds: str) -> list[Any]:
    r = client.get(f"/v1/datasets/{ds}/ledger", params={"limit": 500})
    assert r.status_code == 200 and r.json()["next_cursor"] is None, r.text
    return list(r.json()["entries"])


def _composed_laplace(epsilons: list[float], delta: float) -> float:
    """An independent bound on the composition of Laplace mechanisms of ``epsilons``: the
    least of their pure-DP sum and dp_accounting's RDP accountant at ``delta``."""
    import dp_accounting
    from dp_accounting.rdp import rdp_privacy_accountant as rdpa

    acc = rdpa.RdpAccountant()
    for e in epsilons:
        acc.compose(dp_accounting.LaplaceDpEvent(1.0 / e))
    return min(math.fsum(epsilons), acc.get_epsilon(delta))
