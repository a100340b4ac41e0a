"""Adaptive datasets with an ``entry_delta_budget`` (the part of the budget delta set aside at
creation for mechanisms with their own delta) through the service, on SQLite and PostgreSQL
(the ``client`` fixture): created, charged, refused beyond the split, reported, changed only
before the first charge, refused where it has no meaning.

Expected figures come from the accounting core (``Filter.create(..., entry_delta=...)``, tested
against the plain filter for the smaller budget and dp_accounting in
tests/unit/test_entry_delta_budget.py)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.accounting.filters import Budget, Filter, FilterKind
from app.accounting.mechanisms import mechanism_from_dict
from tests.conftest import new_dataset

BUDGET = {"epsilon": 2.0, "delta": 1e-5}
SPLIT = 4.5e-6  # four 1e-6 and half of one more
EXACT = 4e-6  # four 1e-6 exactly (their rounded-up running sum is 4.000000000000001e-06)
APPROX = {"mechanism": "approx_dp", "epsilon": 0.1, "delta": 1e-6}
GAUSS = {"mechanism": "gaussian", "sigma": 5.0}


def _charge(client: TestClient, ds: dict[str, Any], mechanism: dict[str, Any], **extra: Any) -> Any:
    return client.post(f"/v1/datasets/{ds['id']}/charges", json={"mechanism": mechanism, **extra})


@pytest.mark.parametrize(
    ("accounting", "kind"), [("rdp", "rdp_fixed_orders"), ("zcdp", "zcdp_filter")]
)
def test_entries_with_their_own_delta_are_charged_within_the_split(
    client: TestClient, accounting: str, kind: str
) -> None:
    ds = new_dataset(
        client,
        f"split-{accounting}",
        budget=BUDGET,
        accounting=accounting,
        entry_delta_budget=EXACT,
    )
    assert ds["adaptive"] is True and ds["filter"] == kind
    assert ds["entry_delta_budget"] == EXACT
    assert ds["filter_description"].endswith(
        "; delta 4e-06 set aside for mechanisms with their own delta"
    )
    expected_filter = Filter.create(FilterKind(kind), Budget(2.0, 1e-5), entry_delta=EXACT)
    if expected_filter.bound is not None:
        assert ds["filter_bound"] == {"rho": expected_filter.bound}
    else:
        assert expected_filter.params is not None
        assert ds["filter_params"] == expected_filter.params.to_dict()
    total = None
    for _ in range(4):  # 4 x 1e-6 within the split
        r = _charge(client, ds, APPROX)
        assert r.status_code == 201, r.text
        curve = mechanism_from_dict(APPROX).curve()
        total = curve if total is None else total + curve
    assert total is not None
    r = _charge(client, ds, GAUSS)  # no delta of its own: admitted as usual
    assert r.status_code == 201, r.text
    total = total + mechanism_from_dict(GAUSS).curve()
    expected = expected_filter.spend(total)
    assert r.json()["spent"]["epsilon"] == pytest.approx(expected.epsilon, rel=1e-9)
    budget = client.get(f"/v1/datasets/{ds['id']}/budget").json()
    assert budget["spent"]["epsilon"] == pytest.approx(expected.epsilon, rel=1e-9)
    assert budget["spent"]["delta"] == BUDGET["delta"]
    # what the own deltas may still add up to: nothing (the four fill the split exactly)
    room = budget["remaining"]["entry_delta"]
    assert room == 0.0
    assert client.get(f"/v1/datasets/{ds['id']}").json()["remaining"]["entry_delta"] == room
    # one more delta beyond the split: 409, recorded as a rejection, saying why
    r = _charge(client, ds, APPROX)
    assert r.status_code == 409, r.text
    assert "entry_delta_budget" in r.json()["detail"]
    rejections = client.get("/v1/rejections").json()["rejections"]
    assert len(rejections) == 1
    # a delta alone beyond the split can never be admitted: 422, nothing recorded
    big = {"mechanism": "zcdp", "rho": 0.001, "delta": 5e-6}
    r = _charge(client, ds, big)
    assert r.status_code == 422, r.text
    assert "more than the entry_delta_budget" in r.json()["detail"]
    assert r.json()["entry_delta_budget"] == EXACT
    assert client.get(f"/v1/datasets/{ds['id']}/budget").json()["entries"] == 5
    # the delta at an epsilon counts the whole split
    d = client.get(f"/v1/datasets/{ds['id']}/spend", params={"epsilon": 1.9}).json()
    assert d["delta"] == pytest.approx(expected_filter.spend_delta(total, 1.9).delta, rel=1e-9)


def test_reservations_and_dry_runs_respect_the_split(client: TestClient) -> None:
    ds = new_dataset(client, "held", budget=BUDGET, entry_delta_budget=SPLIT)
    for _ in range(3):
        r = client.post(f"/v1/datasets/{ds['id']}/reservations", json={"mechanism": APPROX})
        assert r.status_code == 201, r.text
    dry = client.post(
        f"/v1/datasets/{ds['id']}/charges", json={"mechanism": APPROX}, params={"dry_run": "true"}
    )
    assert dry.status_code == 200 and dry.json()["admitted"] is True
    assert _charge(client, ds, APPROX).status_code == 201  # 3 held + 1 within the split
    room = client.get(f"/v1/datasets/{ds['id']}/budget").json()["remaining"]["entry_delta"]
    assert room == pytest.approx(SPLIT - 4e-6, rel=1e-9)  # the holds counted
    r = client.post(f"/v1/datasets/{ds['id']}/reservations", json={"mechanism": APPROX})
    assert r.status_code == 409, r.text


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"adaptive": False}, "non-adaptive"),
        ({"accounting": "pld", "adaptive": False}, "non-adaptive"),
        ({"allowed_mechanisms": ["gaussian"]}, "Gaussian mechanisms only"),
        ({"entry_delta_budget": 1e-5}, "must be in"),
        (
            {"partition": {"unit": "day"}, "lifetime_budget": {"epsilon": 5.0, "delta": 1e-5}},
            "needs a lifetime_entry_delta_budget too",
        ),
        ({"lifetime_entry_delta_budget": 1e-6}, "give lifetime_budget"),
        (
            {"partition": {"unit": "day"}, "lifetime_entry_delta_budget": 1e-6},
            "give lifetime_budget",
        ),
        (
            {
                "partition": {"unit": "day"},
                "lifetime_budget": {"epsilon": 5.0, "delta": 1e-5},
                "lifetime_entry_delta_budget": 1e-5,
            },
            "must be in",
        ),
        (
            {
                "partition": {"unit": "day"},
                "lifetime_budget": {"epsilon": 5.0, "delta": 1e-5},
                "lifetime_entry_delta_budget": 1e-6,
                "entry_delta_budget": 0.0,
            },
            "would never be used",
        ),
    ],
)
def test_a_split_where_it_has_no_meaning_is_422(
    client: TestClient, fields: dict[str, Any], message: str
) -> None:
    body = {"name": "x", "budget": BUDGET, "entry_delta_budget": SPLIT, **fields}
    r = client.post("/v1/datasets", json=body)
    assert r.status_code == 422, r.text
    assert message in r.json()["detail"]
    for bad in (-1e-9, 1.0, "nan", None):
        r = client.post("/v1/datasets", json={**body, "entry_delta_budget": bad})
        assert r.status_code == 422, r.text


def test_the_split_changes_only_before_the_first_charge(client: TestClient) -> None:
    ds = new_dataset(client, "later", budget=BUDGET)
    assert ds["entry_delta_budget"] == 0.0
    assert ds["remaining"]["entry_delta"] is None  # nothing set aside
    assert _charge(client, ds, APPROX).status_code == 422  # nothing set aside
    r = client.patch(f"/v1/datasets/{ds['id']}", json={"lifetime_entry_delta_budget": SPLIT})
    assert r.status_code == 422, r.text  # no lifetime budget to set it aside from
    assert "give lifetime_budget" in r.json()["detail"]
    r = client.patch(f"/v1/datasets/{ds['id']}", json={"entry_delta_budget": SPLIT})
    assert r.status_code == 200, r.text
    assert r.json()["entry_delta_budget"] == SPLIT
    audit = client.get("/v1/audit").json()
    changed = [e for e in audit["events"] if e["action"].startswith("dataset.")][0]
    assert changed["details"]["changes"]["entry_delta_budget"] == {"old": 0.0, "new": SPLIT}
    assert _charge(client, ds, APPROX).status_code == 201
    r = client.patch(f"/v1/datasets/{ds['id']}", json={"entry_delta_budget": 0.0})
    assert r.status_code == 409, r.text
    # a budget change keeps the split, and needs a delta above it
    r = client.patch(f"/v1/datasets/{ds['id']}", json={"budget": {"epsilon": 3.0}})
    assert r.status_code == 200 and r.json()["entry_delta_budget"] == SPLIT
    r = client.patch(f"/v1/datasets/{ds['id']}", json={"budget": {"delta": 2e-6}})
    assert r.status_code == 422, r.text
    r = client.patch(f"/v1/datasets/{ds['id']}", json={"entry_delta_budget": None})
    assert r.status_code == 422, r.text


def test_allocations_set_their_own_part_aside(client: TestClient) -> None:
    """An allocation keeps its own split (none by default: 422 naming it), admitted within
    both its own and the dataset's; none on a dataset that sets nothing aside."""
    plain = new_dataset(client, "plain", budget=BUDGET)
    r = client.post(
        f"/v1/datasets/{plain['id']}/allocations",
        json={"name": "a", "budget": {"epsilon": 1.0, "delta": 5e-6}, "entry_delta_budget": 1e-6},
    )
    assert r.status_code == 422 and "sets no part of its delta aside" in r.json()["detail"]
    ds = new_dataset(client, "teams", budget=BUDGET, entry_delta_budget=SPLIT)
    for name, split in (("team-a", 0.0), ("team-b", 2.5e-6)):
        r = client.post(
            f"/v1/datasets/{ds['id']}/allocations",
            json={
                "name": name,
                "budget": {"epsilon": 1.0, "delta": 5e-6},
                "entry_delta_budget": split,
            },
        )
        assert r.status_code == 201, r.text
        assert r.json()["entry_delta_budget"] == split
    r = _charge(client, ds, APPROX, allocation="team-a")
    assert r.status_code == 422, r.text
    assert "allocation 'team-a'" in r.json()["detail"]
    r = client.get(
        f"/v1/datasets/{ds['id']}/calibrate",
        params={"mechanism": "approx_dp", "delta": 1e-6, "allocation": "team-a"},
    )
    assert r.status_code == 422, r.text
    assert _charge(client, ds, GAUSS, allocation="team-a").status_code == 201
    # team-b: two deltas of 1e-6 within its 2.5e-6, the third beyond it (409, its limit)
    for _ in range(2):
        assert _charge(client, ds, APPROX, allocation="team-b").status_code == 201
    r = _charge(client, ds, APPROX, allocation="team-b")
    assert r.status_code == 409, r.text
    assert r.json().get("limit") == "allocation"
    view = client.get(f"/v1/datasets/{ds['id']}/allocations/team-b").json()
    # its orders are chosen, as a new allocation's are, for its budget less its split
    expected = Filter.create(FilterKind.RDP_FIXED_ORDERS, Budget(1.0, 5e-6), entry_delta=2.5e-6)
    curve = mechanism_from_dict(APPROX).curve()
    assert view["remaining"]["entry_delta"] == pytest.approx(0.5e-6, rel=1e-9)
    assert view["spent"]["epsilon"] == pytest.approx(
        expected.spend(curve + curve).epsilon, rel=1e-9
    )
    assert _charge(client, ds, APPROX).status_code == 201  # on the dataset itself: 3e-6 of 4.5
    # a budget change keeps the split and needs a delta above it
    r = client.patch(
        f"/v1/datasets/{ds['id']}/allocations/team-b", json={"budget": {"epsilon": 2.0}}
    )
    assert r.status_code == 200 and r.json()["entry_delta_budget"] == 2.5e-6
    r = client.patch(
        f"/v1/datasets/{ds['id']}/allocations/team-b", json={"budget": {"delta": 2e-6}}
    )
    assert r.status_code == 422, r.text


_DELTAS = st.one_of(
    st.floats(1e-12, 0.5),
    st.sampled_from([5e-324, 2.0**-1022, 1e-300, 1e-6, 0.5, 0.999999]),
)
_SHARES = st.one_of(st.floats(0, 1), st.sampled_from([0.0, 1.0, 1.5, 1e-300]))


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(
    delta=_DELTAS,
    split_share=_SHARES,
    epsilon=st.sampled_from([1e-9, 0.1, 1.0, 1e6]),
    accounting=st.sampled_from(["rdp", "rdp", "zcdp", "pld"]),
    adaptive=st.sampled_from([True, True, False]),
    allowed=st.sampled_from([None, None, ["gaussian"], ["approx_dp", "gaussian"]]),
    own_share=_SHARES,
    kind=st.sampled_from(["approx_dp", "zcdp", "rdp"]),
    partitioned=st.booleans(),
    life_share=st.one_of(st.none(), _SHARES),
)
def test_any_split_and_any_own_delta_answer_4xx_never_5xx(
    client: TestClient,
    delta: float,
    split_share: float,
    epsilon: float,
    accounting: str,
    adaptive: bool,
    allowed: list[str] | None,
    own_share: float,
    kind: str,
    partitioned: bool,
    life_share: float | None,
) -> None:
    """Splits and own deltas drawn as shares of the budget delta (extremes included), on
    unpartitioned and partitioned datasets (charges over overlapping day ranges there), these
    with a lifetime budget (twice the budget, its own split a share of its delta) or not."""
    split = min(1.0, delta * split_share)
    own_delta = min(1.0, delta * own_share)
    body: dict[str, Any] = {
        "name": uuid.uuid4().hex,
        "budget": {"epsilon": epsilon, "delta": delta},
        "accounting": accounting,
        "adaptive": adaptive,
        "entry_delta_budget": split,
        "allowed_mechanisms": allowed,
    }
    if partitioned:
        body["partition"] = {"unit": "day"}
    if life_share is not None:
        life_delta = min(0.5, 2.0 * delta)
        body["lifetime_budget"] = {"epsilon": 2.0 * epsilon, "delta": life_delta}
        body["lifetime_entry_delta_budget"] = min(1.0, life_delta * life_share)
    r = client.post("/v1/datasets", json=body)
    assert r.status_code in (201, 422), r.text
    if r.status_code != 201:
        return
    ds = r.json()["id"]
    wire = {
        "approx_dp": {"mechanism": "approx_dp", "epsilon": 0.1, "delta": own_delta},
        "zcdp": {"mechanism": "zcdp", "rho": 0.01, "delta": own_delta},
        "rdp": {"mechanism": "rdp", "orders": [2, 8], "epsilons": [0.1, 0.2], "delta": own_delta},
    }[kind]
    ranges = [("2026-11-01", "2026-11-02"), ("2026-11-02", "2026-11-03")] if partitioned else [None]
    for span in ranges:
        where = {} if span is None else {"blocks": {"from": span[0], "to": span[1]}}
        for path in ("charges", "charges", "reservations"):
            r = client.post(f"/v1/datasets/{ds}/{path}", json={"mechanism": wire, **where})
            assert r.status_code in (201, 409, 422), r.text
    blocks = {"block_from": "2026-11-02", "block_to": "2026-11-02"} if partitioned else {}
    r = client.get(
        f"/v1/datasets/{ds}/calibrate",
        params={"mechanism": "approx_dp", "delta": own_delta, **blocks},
    )
    assert r.status_code in (200, 409, 422), r.text
    if partitioned:
        r = client.get(
            f"/v1/datasets/{ds}/blocks", params={"from": "2026-11-01", "to": "2026-11-03"}
        )
        assert r.status_code == 200, r.text
    for query in ({"delta": own_delta}, {"epsilon": 0.5}):
        r = client.get(f"/v1/datasets/{ds}/spend", params=query)
        assert r.status_code in (200, 422), r.text
    assert client.get(f"/v1/datasets/{ds}/budget").status_code == 200
    r = client.patch(f"/v1/datasets/{ds}", json={"budget": {"delta": own_delta}})
    assert r.status_code in (200, 409, 422), r.text


def _in_blocks(first: str, last: str, **body: Any) -> dict[str, Any]:
    return {"mechanism": APPROX, "blocks": {"from": first, "to": last}, **body}


def test_a_partitioned_dataset_sets_the_split_aside_in_each_block(client: TestClient) -> None:
    """Each block's filter is the dataset's: each block admits own deltas up to the split (two
    of 1e-6 in 2e-6, exactly), counts a charge over several blocks in each, and refuses past
    it naming the block; a lifetime budget can be added to it only with a split of its own.
    Expected spends come from the accounting core's filter for one block."""
    split = 2e-6
    ds = new_dataset(
        client, "daily", budget=BUDGET, partition={"unit": "day"}, entry_delta_budget=split
    )
    assert ds["entry_delta_budget"] == split and ds["adaptive"] is True
    url = f"/v1/datasets/{ds['id']}"
    for first, last in (("2026-11-01", "2026-11-02"), ("2026-11-02", "2026-11-03")):
        r = client.post(f"{url}/charges", json=_in_blocks(first, last))
        assert r.status_code == 201, r.text
    r = client.post(f"{url}/charges", json=_in_blocks("2026-11-02", "2026-11-02"))
    assert r.status_code == 409, r.text
    problem = r.json()
    assert problem["blocks_exceeded"] == ["2026-11-02"]
    assert "in block 2026-11-02 would add up to 3e-06" in problem["detail"]
    assert "entry_delta_budget 2e-06" in problem["detail"]
    assert (
        client.post(f"{url}/charges", json=_in_blocks("2026-11-03", "2026-11-04")).status_code
        == 201
    )

    flt = Filter.create(FilterKind(ds["filter"]), Budget(2.0, 1e-5), entry_delta=split)
    one = mechanism_from_dict(APPROX).curve()
    got = client.get(f"{url}/blocks", params={"from": "2026-11-01", "to": "2026-11-05"}).json()
    charged = {"2026-11-01": 1, "2026-11-02": 2, "2026-11-03": 2, "2026-11-04": 1}
    for b in got["blocks"]:
        n = charged.get(b["block"], 0)
        if n == 0:
            assert b["spent"]["epsilon"] == 0.0 and b["remaining"]["entry_delta"] == split
            continue
        total = one.scaled(n) if n > 1 else one
        assert b["spent"]["epsilon"] == pytest.approx(flt.spend(total).epsilon, rel=1e-12)
        room = b["remaining"]["entry_delta"]
        assert room == (0.0 if n == 2 else pytest.approx(split - 1e-6, rel=1e-12))
    # a lifetime budget now: 422 without a split of its own, nothing changed; it may not take
    # one after the first charge either (the lifetime's rule would change under its ledger)
    lifetime = {"epsilon": 5.0, "delta": 1e-5}
    r = client.patch(url, json={"lifetime_budget": lifetime})
    assert r.status_code == 422, r.text
    assert "needs a lifetime_entry_delta_budget too" in r.json()["detail"]
    assert client.get(url).json()["lifetime_budget"] is None
    r = client.patch(url, json={"lifetime_budget": lifetime, "lifetime_entry_delta_budget": 8e-6})
    assert r.status_code == 409, r.text
    assert client.get(url).json()["lifetime_budget"] is None


def test_a_lifetime_budget_sets_its_own_split_aside(client: TestClient) -> None:
    """A partitioned dataset with a lifetime budget: each block sets ``entry_delta_budget``
    aside, the lifetime budget ``lifetime_entry_delta_budget`` (the own deltas of all blocks
    add up there). Three 1e-6 fill a lifetime split of 3e-6 exactly, in three blocks whose own
    splits are far from full; the fourth is refused by the lifetime budget, naming its split.
    Expected spends come from the accounting core's filter for the lifetime budget."""
    life_split = 3e-6
    lifetime = {"epsilon": 5.0, "delta": 1e-5}
    ds = new_dataset(
        client,
        "daily-life",
        budget=BUDGET,
        partition={"unit": "day"},
        entry_delta_budget=2e-6,
        lifetime_budget=lifetime,
        lifetime_entry_delta_budget=life_split,
    )
    assert ds["entry_delta_budget"] == 2e-6
    assert ds["lifetime_entry_delta_budget"] == life_split
    assert ds["remaining"]["entry_delta"] == life_split  # the lifetime budget's room
    url = f"/v1/datasets/{ds['id']}"
    created = [e for e in client.get("/v1/audit").json()["events"] if e["dataset_id"] == ds["id"]]
    assert created[-1]["details"]["lifetime_entry_delta_budget"] == life_split
    for day in ("2026-11-01", "2026-11-02", "2026-11-03"):
        r = client.post(f"{url}/charges", json=_in_blocks(day, day))
        assert r.status_code == 201, r.text
    r = client.post(f"{url}/charges", json=_in_blocks("2026-11-04", "2026-11-04"))
    assert r.status_code == 409, r.text
    problem = r.json()
    assert problem["limit"] == "lifetime" and problem.get("blocks_exceeded", []) == []
    assert "would add up to 4e-06, above the lifetime_entry_delta_budget 3e-06" in problem["detail"]

    flt = Filter.create(FilterKind(ds["filter"]), Budget(5.0, 1e-5), entry_delta=life_split)
    total = mechanism_from_dict(APPROX).curve().scaled(3)
    got = client.get(url).json()
    assert got["spent"]["epsilon"] == pytest.approx(flt.spend(total).epsilon, rel=1e-12)
    assert got["remaining"]["entry_delta"] == 0.0
    view = client.get(f"{url}/budget").json()
    assert view["lifetime"]["remaining"]["entry_delta"] == 0.0
    assert view["lifetime"]["spent"]["epsilon"] == got["spent"]["epsilon"]
    block = client.get(f"{url}/blocks", params={"from": "2026-11-01", "to": "2026-11-01"}).json()
    assert block["blocks"][0]["remaining"]["entry_delta"] == pytest.approx(1e-6, rel=1e-12)
    # a Gaussian still fits the lifetime budget: its delta is not an own delta
    r = client.post(
        f"{url}/charges",
        json={"mechanism": GAUSS, "blocks": {"from": "2026-11-04", "to": "2026-11-04"}},
    )
    assert r.status_code == 201, r.text
    # after the first charge the lifetime split is fixed; the lifetime budget may change and
    # keeps it, but its delta must stay above it
    r = client.patch(url, json={"lifetime_entry_delta_budget": 4e-6})
    assert r.status_code == 409, r.text
    r = client.patch(url, json={"lifetime_budget": {"epsilon": 6.0}})
    assert r.status_code == 200, r.text
    assert r.json()["lifetime_entry_delta_budget"] == life_split
    r = client.patch(url, json={"lifetime_budget": {"delta": 2e-6}})
    assert r.status_code == 422, r.text


def test_an_own_delta_above_the_lifetime_split_is_422(client: TestClient) -> None:
    """A delta within each block's split but above the lifetime budget's can never be
    admitted: 422 naming the lifetime split, for charges, reservations and calibration; the
    split may change before the first charge (audited)."""
    ds = new_dataset(
        client,
        "daily-narrow",
        budget=BUDGET,
        partition={"unit": "day"},
        entry_delta_budget=2e-6,
        lifetime_budget={"epsilon": 5.0, "delta": 1e-5},
        lifetime_entry_delta_budget=1.5e-6,
    )
    url = f"/v1/datasets/{ds['id']}"
    wide = {"mechanism": "approx_dp", "epsilon": 0.1, "delta": 1.8e-6}
    where = {"blocks": {"from": "2026-11-01", "to": "2026-11-01"}}
    for path in ("charges", "reservations"):
        r = client.post(f"{url}/{path}", json={"mechanism": wide, **where})
        assert r.status_code == 422, r.text
        assert "lifetime_entry_delta_budget of the lifetime budget" in r.json()["detail"]
        assert r.json()["lifetime_entry_delta_budget"] == 1.5e-6
    r = client.get(
        f"{url}/calibrate",
        params={
            "mechanism": "approx_dp",
            "delta": 1.8e-6,
            "block_from": "2026-11-01",
            "block_to": "2026-11-01",
        },
    )
    assert r.status_code == 422, r.text
    r = client.patch(url, json={"lifetime_entry_delta_budget": 2e-6})
    assert r.status_code == 200, r.text
    assert r.json()["lifetime_entry_delta_budget"] == 2e-6
    events = client.get("/v1/audit").json()["events"]
    changed = [e for e in events if e["dataset_id"] == ds["id"] and "changes" in e["details"]]
    assert changed[0]["details"]["changes"]["lifetime_entry_delta_budget"] == {
        "old": 1.5e-6,
        "new": 2e-6,
    }
    assert client.post(f"{url}/charges", json={"mechanism": wide, **where}).status_code == 201
    r = client.patch(url, json={"entry_delta_budget": 0.0})
    assert r.status_code == 409, r.text


def test_a_partitioned_allocation_sets_its_own_split_aside_in_each_block(
    client: TestClient,
) -> None:
    ds = new_dataset(
        client, "daily-teams", budget=BUDGET, partition={"unit": "week"}, entry_delta_budget=4e-6
    )
    url = f"/v1/datasets/{ds['id']}"
    r = client.post(
        f"{url}/allocations",
        json={
            "name": "team",
            "budget": {"epsilon": 1.0, "delta": 5e-6},
            "entry_delta_budget": 1e-6,
        },
    )
    assert r.status_code == 201, r.text
    body = _in_blocks("2026-W01", "2026-W02", allocation="team")
    assert client.post(f"{url}/charges", json=body).status_code == 201
    r = client.post(f"{url}/charges", json=_in_blocks("2026-W02", "2026-W02", allocation="team"))
    assert r.status_code == 409, r.text
    problem = r.json()
    assert problem["limit"] == "allocation"
    assert problem["allocation_blocks_exceeded"] == ["2026-W02"]
    assert "entry_delta_budget 1e-06" in problem["detail"]
    # the dataset's own split per block still has room: a charge without the allocation fits
    assert client.post(f"{url}/charges", json=_in_blocks("2026-W02", "2026-W02")).status_code == 201
    # calibration for the next one through the allocation answers the same refusal up front
    r = client.get(
        f"{url}/calibrate",
        params={
            "mechanism": "approx_dp",
            "delta": 1e-6,
            "allocation": "team",
            "block_from": "2026-W02",
            "block_to": "2026-W02",
        },
    )
    assert r.status_code == 409, r.text
