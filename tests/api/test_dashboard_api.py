"""The dashboard's read models: series, curves, a dataset's rejections, and the page itself."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from fastapi.testclient import TestClient

from app.accounting.mechanisms import mechanism_from_dict
from app.accounting.orders import ORDERS
from app.services.dashboard import sample_seqs
from tests.conftest import new_dataset

MECHS = [
    {"mechanism": "gaussian", "sigma": 30.0},
    {"mechanism": "laplace", "epsilon": 0.01},
    {"mechanism": "randomized_response", "epsilon": 0.02, "k": 3},
    {"mechanism": "subsampled_gaussian", "sigma": 1.2, "sample_rate": 0.01, "steps": 20},
]


def _fill(
    client: TestClient, ds_id: str, n: int, mechs: list[dict[str, object]] = MECHS
) -> list[dict[str, object]]:
    used = []
    for i in range(n):
        m = mechs[i % len(mechs)]
        r = client.post(f"/v1/datasets/{ds_id}/charges", json={"mechanism": m})
        assert r.status_code == 201, r.text
        used.append(m)
    return used


def test_sample_seqs_spreads_evenly_with_both_ends() -> None:
    assert sample_seqs(0, 10) == []
    assert sample_seqs(5, 10) == [1, 2, 3, 4, 5]
    s = sample_seqs(100_000, 400)
    assert s[0] == 1 and s[-1] == 100_000 and len(s) == 400
    gaps = np.diff(s)
    assert gaps.min() >= 250 and gaps.max() <= 252


def test_series_is_the_recorded_spend_at_evenly_spaced_entries(client: TestClient) -> None:
    ds = new_dataset(client, budget={"epsilon": 10.0, "delta": 1e-6}, accounting="rdp")
    _fill(client, ds["id"], 23)
    empty = new_dataset(client, name="empty")
    assert client.get(f"/v1/datasets/{empty['id']}/series").json()["points"] == []

    full = client.get(f"/v1/datasets/{ds['id']}/series").json()
    assert full["entries"] == 23 and not full["downsampled"]
    ledger = client.get(f"/v1/datasets/{ds['id']}/ledger?limit=100").json()["entries"]
    by_seq = {e["seq"]: e["spent_epsilon"] for e in ledger}
    assert [p["seq"] for p in full["points"]] == list(range(1, 24))
    assert all(p["epsilon"] == by_seq[p["seq"]] for p in full["points"])
    eps = [p["epsilon"] for p in full["points"]]
    assert eps == sorted(eps)  # composition only adds
    budget = client.get(f"/v1/datasets/{ds['id']}/budget").json()
    assert eps[-1] == budget["spent"]["epsilon"]

    few = client.get(f"/v1/datasets/{ds['id']}/series?points=5").json()
    assert few["downsampled"] and [p["seq"] for p in few["points"]] == sample_seqs(23, 5)
    assert few["points"][-1]["epsilon"] == eps[-1]
    for bad in (1, 5001, "x"):
        r = client.get(f"/v1/datasets/{ds['id']}/series?points={bad}")
        assert r.status_code == 422 and "points" in r.json()["detail"]


@pytest.mark.parametrize("accounting", ["rdp", "zcdp", "pld"])
def test_curves_match_the_core_and_the_spend_endpoint(client: TestClient, accounting: str) -> None:
    """The spend and the trade-off are those /budget and /spend report: on a pld dataset, from
    its stored PLD (the curves showed its RDP bound: 0.490202 where /budget said 0.489962)."""
    ds = new_dataset(
        client,
        budget={"epsilon": 8.0, "delta": 1e-6},
        accounting=accounting,
        **({"adaptive": False} if accounting == "pld" else {}),
    )
    # zCDP does not amplify by subsampling: DP-SGD entries would not fit a zCDP budget here
    used = _fill(client, ds["id"], 9, MECHS if accounting == "rdp" else MECHS[:3])
    c = client.get(f"/v1/datasets/{ds['id']}/curves").json()
    assert c["orders"] == [float(a) for a in ORDERS]
    composed = sum((mechanism_from_dict(m).curve().rdp for m in used), start=np.zeros_like(ORDERS))
    np.testing.assert_allclose(c["rdp"], composed, rtol=1e-12)
    budget = client.get(f"/v1/datasets/{ds['id']}/budget").json()
    assert c["spent"]["epsilon"] == budget["spent"]["epsilon"]
    deltas = [t["delta"] for t in c["tradeoff"]]
    assert deltas == sorted(deltas) and 1e-6 in deltas
    assert deltas[0] == pytest.approx(1e-15) and deltas[-1] == pytest.approx(0.1)
    eps = [t["epsilon"] for t in c["tradeoff"]]
    assert all(a >= b for a, b in zip(eps, eps[1:], strict=False))  # epsilon falls as delta grows
    for t in c["tradeoff"][::7]:
        s = client.get(f"/v1/datasets/{ds['id']}/spend", params={"delta": t["delta"]}).json()
        assert s["epsilon"] == t["epsilon"] and s["method"] == t["method"]
    if accounting == "pld":
        assert c["spent"]["method"] == budget["spent"]["method"] == "pld"
    # the budget curve: positive where some ledger can fit, rising with the order
    b = [x for x in c["budget_rdp"] if x is not None]
    assert b and all(x > 0 for x in b)
    if accounting == "zcdp":
        rho_b = c["budget_rdp"][0] / ORDERS[0]
        np.testing.assert_allclose(c["budget_rdp"], rho_b * ORDERS, rtol=1e-12)
        assert math.isfinite(rho_b) and rho_b > 0


def test_dataset_rejections_are_visible_to_viewers(client: TestClient) -> None:
    ds = new_dataset(client)
    other = new_dataset(client, name="other")
    big = {"mechanism": "laplace", "epsilon": 5.0}
    assert (
        client.post(f"/v1/datasets/{ds['id']}/charges", json={"mechanism": big}).status_code == 409
    )
    viewer = client.post("/v1/keys", json={"role": "viewer", "datasets": [ds["id"]]}).json()["key"]
    h = {"Authorization": f"Bearer {viewer}"}
    got = client.get(f"/v1/datasets/{ds['id']}/rejections", headers=h).json()["rejections"]
    assert len(got) == 1 and got[0]["mechanism"]["epsilon"] == 5.0 and "refused" in got[0]["reason"]
    assert client.get(f"/v1/datasets/{other['id']}/rejections", headers=h).status_code == 404


def test_rejections_filter_by_kind_across_pages(client: TestClient) -> None:
    """Dashboard audit (stop 31): the page filtered refusals by kind among the 25 it had read,
    so an older refusal of that kind was never found. The API filters by kind (the dataset's
    list and the admin's), newest first, paged by the same cursor."""
    ds = new_dataset(client)["id"]
    refused = [{"mechanism": "gaussian", "sigma": 0.01}] + [
        {"mechanism": "laplace", "epsilon": 5.0 + i} for i in range(4)
    ]
    refused.insert(2, {"mechanism": "gaussian", "sigma": 0.02})
    for m in refused:
        r = client.post(f"/v1/datasets/{ds}/charges", json={"mechanism": m})
        assert r.status_code == 409, r.text
    path = f"/v1/datasets/{ds}/rejections"
    first = client.get(path, params={"kind": "gaussian", "limit": 1}).json()
    assert [x["mechanism"]["sigma"] for x in first["rejections"]] == [0.02]
    rest = client.get(
        path, params={"kind": "gaussian", "limit": 1, "cursor": first["next_cursor"]}
    ).json()
    assert [x["mechanism"]["sigma"] for x in rest["rejections"]] == [0.01]
    assert rest["next_cursor"] is None
    laplace = client.get(path, params={"kind": "laplace"}).json()["rejections"]
    assert [x["mechanism"]["epsilon"] for x in laplace] == [8.0, 7.0, 6.0, 5.0]
    assert client.get(path, params={"kind": "rappor"}).json()["rejections"] == []
    admin = client.get("/v1/rejections", params={"dataset": ds, "kind": "gaussian"}).json()
    assert len(admin["rejections"]) == 2


def test_refusals_and_holds_name_their_key_as_the_ledger_does(client: TestClient) -> None:
    """Dashboard audit (stop 31): the ledger named a key by its label (``key_name``), refusals
    and holds only by its id, so one key read as two on one page."""
    ds = new_dataset(client)["id"]
    made = client.post("/v1/keys", json={"role": "pipeline", "label": "etl-nightly"}).json()
    h = {"Authorization": f"Bearer {made['key']}"}
    for body in ({"epsilon": 0.2}, {"epsilon": 5.0}):
        m = {"mechanism": {"mechanism": "laplace", **body}}
        client.post(f"/v1/datasets/{ds}/charges", json=m, headers=h)
        client.post(f"/v1/datasets/{ds}/reservations", json=m, headers=h)
    ledger = client.get(f"/v1/datasets/{ds}/ledger").json()["entries"]
    refused = client.get(f"/v1/datasets/{ds}/rejections").json()["rejections"]
    held = client.get(f"/v1/datasets/{ds}/reservations").json()["reservations"]
    admin = client.get("/v1/rejections", params={"dataset": ds}).json()["rejections"]
    assert len(ledger) == 1 and len(refused) == 2 and len(held) == 1 and len(admin) == 2
    for row in (*ledger, *refused, *held, *admin):
        assert row["key_id"] == made["id"] and row["key_name"] == "etl-nightly", row


def test_dashboard_page_and_static_files(client: TestClient) -> None:
    r = client.get("/", headers={"Authorization": ""})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    assert "script-src 'self'" in r.headers["content-security-policy"]
    assert '<script src="/static/app.js"' in r.text and "http" not in r.text.split("<body>")[1]
    static = (
        ("app.js", "javascript"),
        ("charts.js", "javascript"),
        ("style.css", "css"),
        ("accounting.html", "html"),  # the glossary the accounting links point to
    )
    for name, kind in static:
        s = client.get(f"/static/{name}")
        assert s.status_code == 200 and kind in s.headers["content-type"]
        # no network at run time: nothing is loaded from another origin
        text = s.text.replace('"http://www.w3.org/2000/svg"', "")  # a namespace, not a URL
        assert "https://" not in text and "http://" not in text
    assert client.get("/static/../main.py").status_code == 404
    assert client.get("/static/nope.js").status_code == 404


def test_series_carries_the_budget_changes_for_viewers(client: TestClient) -> None:
    """Budget changes (audited PATCHes) come with the series, oldest first, old and new budget,
    for a viewer key that cannot read /v1/audit; other changes and other datasets are not in."""
    ds = new_dataset(client, budget={"epsilon": 1.0, "delta": 1e-6})
    other = new_dataset(client, name="other")
    base = f"/v1/datasets/{ds['id']}"
    assert client.get(f"{base}/series").json()["budget_changes"] == []
    budgets = [{"epsilon": 2.0, "delta": 1e-6}, {"epsilon": 1.5, "delta": 1e-6}]
    for b in budgets:
        assert client.patch(base, json={"budget": b}).status_code == 200
    assert client.patch(base, json={"description": "not a budget change"}).status_code == 200
    assert (
        client.patch(f"/v1/datasets/{other['id']}", json={"budget": budgets[0]}).status_code == 200
    )
    viewer = client.post("/v1/keys", json={"role": "viewer"}).json()["key"]
    h = {"Authorization": f"Bearer {viewer}"}
    assert client.get("/v1/audit", headers=h).status_code == 403
    changes = client.get(f"{base}/series", headers=h).json()["budget_changes"]
    assert [c["action"] for c in changes] == ["budget.raised", "budget.lowered"]
    assert [c["new"] for c in changes] == budgets
    assert [c["old"] for c in changes] == [{"epsilon": 1.0, "delta": 1e-6}, budgets[0]]
    assert changes[0]["created_at"] <= changes[1]["created_at"]
    assert "key_id" not in changes[0]


def test_a_partitioned_series_is_judged_by_its_lifetime_budget(client: TestClient) -> None:
    """The series of a partitioned dataset plots the lifetime spend: its budget is the lifetime
    budget, and the changes marked are the lifetime budget's (audited as dataset.changed),
    which move that spend; a change of the per-block budget or of the description is not."""
    lifetime = {"epsilon": 3.0, "delta": 1e-6}
    ds = new_dataset(client, partition={"unit": "day"}, lifetime_budget=lifetime)
    base = f"/v1/datasets/{ds['id']}"
    charge = {"mechanism": {"mechanism": "gaussian", "sigma": 8.0}}
    for day in ("2026-11-01", "2026-11-02"):
        body = {**charge, "blocks": {"from": day, "to": day}}
        assert client.post(f"{base}/charges", json=body).status_code == 201
    tighter = {"epsilon": 3.0, "delta": 1e-9}
    assert client.patch(base, json={"lifetime_budget": tighter}).status_code == 200
    assert client.patch(base, json={"budget": {"epsilon": 0.9}}).status_code == 200
    assert client.patch(base, json={"description": "not a budget change"}).status_code == 200
    # both in one PATCH: audited as budget.lowered, and a lifetime change all the same
    both = {"budget": {"epsilon": 0.8}, "lifetime_budget": {"epsilon": 2.5}}
    assert client.patch(base, json=both).status_code == 200
    last = {"epsilon": 2.5, "delta": 1e-9}
    series = client.get(f"{base}/series").json()
    assert series["budget"] == last
    assert [(c["old"], c["new"]) for c in series["budget_changes"]] == [
        (lifetime, tighter),
        (tighter, last),
    ]
    # the change moved the spend: the last point was recorded before it, /budget is after
    budget = client.get(f"{base}/budget").json()
    assert budget["spent"]["delta"] == 1e-9
    assert budget["spent"]["epsilon"] > series["points"][-1]["epsilon"]


DAYS = ("2026-11-20", "2026-11-21", "2026-11-22", "2026-11-23")


@pytest.mark.parametrize("lifetime", [None, {"epsilon": 4.0, "delta": 1e-5}])
def test_a_partitioned_series_says_which_budget_its_line_is(
    client: TestClient, lifetime: dict[str, float] | None
) -> None:
    """Four days each charged epsilon 0.6 of a per-block budget of 1: the series and curves plot
    the composition of all charges (2.4, the exported ledger's sum), which without a lifetime
    budget no budget caps. Their ``budget`` stays the per-block budget (a member clients read)
    and ``budget_scope`` says it is one block's (per_block), so a chart does not draw 2.4
    against a line at 1 (the dashboard read that as "99.9 % used" while the most-spent block,
    /budget's ``blocks.most_spent``, had used 60 %); with a lifetime budget it is that one."""
    fields: dict[str, object] = {"partition": {"unit": "day"}, "adaptive": False}
    if lifetime is not None:
        fields["lifetime_budget"] = lifetime
    ds = new_dataset(client, **fields)
    plain = new_dataset(client, name="plain")
    base = f"/v1/datasets/{ds['id']}"
    for day in DAYS:
        body = {
            "mechanism": {"mechanism": "laplace", "epsilon": 0.6},
            "blocks": {"from": day, "to": day},
        }
        assert client.post(f"{base}/charges", json=body).status_code == 201
    rows = client.get(f"{base}/ledger", params={"format": "jsonl"}).text.splitlines()
    composed = sum(json.loads(row)["mechanism"]["epsilon"] for row in rows)
    assert composed == pytest.approx(2.4)
    budget = client.get(f"{base}/budget").json()
    top = budget["blocks"]["most_spent"]
    # pure bounds: the ledger's epsilons added (the spend at delta is at most that, a bit less)
    assert top["block"] == DAYS[0] and top["spent"]["pure_epsilon"] == pytest.approx(0.6)
    assert budget["lifetime"]["spent"]["pure_epsilon"] == pytest.approx(composed)
    composed = budget["lifetime"]["spent"]["epsilon"]  # the spend at delta every view plots
    assert 2.3 < composed <= 2.4 + 1e-12 and 0.5 < top["spent"]["epsilon"] <= 0.6 + 1e-12

    series = client.get(f"{base}/series").json()
    curves = client.get(f"{base}/curves").json()
    assert series["points"][-1]["epsilon"] == pytest.approx(composed)
    assert curves["spent"]["epsilon"] == pytest.approx(composed)
    if lifetime is None:
        # the per-block budget, unchanged, and marked as not capping the composed spend
        assert series["budget"] == curves["budget"] == budget["budget"] == ds["budget"]
        assert composed > series["budget"]["epsilon"]  # above the line, yet no block is full
        assert budget["blocks"]["exhausted_blocks"] == 0
        assert series["budget_scope"] == curves["budget_scope"] == "per_block"
    else:
        assert series["budget"] == curves["budget"] == lifetime
        assert series["budget_scope"] == curves["budget_scope"] == "lifetime"
    for read in ("series", "curves"):
        assert client.get(f"/v1/datasets/{plain['id']}/{read}").json()["budget_scope"] == "dataset"
