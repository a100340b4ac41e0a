"""Every place that reports a number about a dataset agrees with the others, in every state a
dataset can be in: the dataset (one and listed), ``/budget``, ``/spend`` at the budget delta,
``/curves``, ``/series``, the ledger (JSON, CSV, JSON Lines), ``/metrics``, the reservations
listing, the Python client and ``privacy-ledger ... --json``. A view that computed the spend its
own way could report less than the admission filter uses: a breach on a dashboard or in an
officer's report.

Relations that are documented rather than equalities: ``remaining`` and ``state`` count the
active holds, ``spent`` and ``exhausted`` do not; each ledger entry (and so each series point)
stores the spend right after it at the budget delta of its time, so after a change of the budget
delta the last one differs from ``spent`` and the series lists that change (the dashboard then
draws the current spend as a "now" point)."""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from privacy_ledger_client import LedgerClient
from typer.testing import CliRunner

from app.cli import cli, common
from tests.conftest import ADMIN_KEY, expire_active_holds, new_dataset

GAUSS = {"mechanism": "gaussian", "sigma": 8.0}
LAPLACE = {"mechanism": "laplace", "epsilon": 0.1}
KRR = {"mechanism": "randomized_response", "epsilon": 0.3, "k": 4, "count": 3}
OWN_DELTA = {"mechanism": "approx_dp", "epsilon": 0.2, "delta": 1e-6}
GREEDY = {"mechanism": "gaussian", "sigma": 0.3}  # over any budget here: a 409

KINDS: dict[str, dict[str, Any]] = {
    "rdp-adaptive": {},
    "rdp": {"adaptive": False},
    "zcdp-adaptive": {"accounting": "zcdp"},
    "zcdp": {"accounting": "zcdp", "adaptive": False},
    "pld": {"accounting": "pld", "adaptive": False},
    "gdp": {"allowed_mechanisms": ["gaussian"]},
}


_GAUGE = re.compile(r'privacy_ledger_dataset_(\w+)\{dataset="[^"]*",dataset_id="([^"]*)"\} (\S+)')


def _gauges(client: TestClient, dataset_id: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in client.get("/metrics").text.splitlines():
        m = _GAUGE.fullmatch(line)
        if m is not None and m.group(2) == dataset_id:
            out[m.group(1)] = float(m.group(3))
    return out


def _ok(r: Any) -> Any:
    assert r.status_code in (200, 201), r.text
    return r.json()


@pytest.fixture
def cli_json(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """``privacy-ledger <args> --json`` against the TestClient's app, parsed."""
    monkeypatch.setattr(common, "TRANSPORT", client._transport)
    runner = CliRunner()
    env = {"PRIVACY_LEDGER_URL": "http://testserver", "PRIVACY_LEDGER_API_KEY": ADMIN_KEY}

    def run(*args: str) -> Any:
        result = runner.invoke(cli, [*args, "--json"], env=env)
        assert result.exit_code == 0, (result.stdout, result.exception)
        return json.loads(result.stdout)

    yield run


def _library(client: TestClient) -> LedgerClient:
    return LedgerClient("http://testserver", ADMIN_KEY, transport=client._transport)


def assert_surfaces_agree(
    client: TestClient, cli_json: Any, ds_id: str, *, cli: bool = True
) -> dict[str, Any]:
    """Every surface's numbers for the dataset ``ds_id`` against its ``GET`` (``cli``: the
    command's too); the dataset."""
    u = f"/v1/datasets/{ds_id}"
    one = _ok(client.get(u))
    listed = [
        d for d in _ok(client.get("/v1/datasets?archived=all"))["datasets"] if d["id"] == ds_id
    ]
    assert listed == [one]
    budget = _ok(client.get(f"{u}/budget"))
    for k in ("spent", "remaining", "reserved", "exhausted", "entries", "state", "budget"):
        assert budget[k] == one[k], k
    spent = one["spent"]

    at = _ok(client.get(f"{u}/spend", params={"delta": spent["delta"]}))
    assert (at["epsilon"], at["rho"], at["entries"]) == (
        spent["epsilon"],
        spent["rho"],
        one["entries"],
    )
    curves = _ok(client.get(f"{u}/curves"))
    assert curves["spent"]["epsilon"] == spent["epsilon"]
    assert [t["epsilon"] for t in curves["tradeoff"] if t["delta"] == spent["delta"]] == [
        spent["epsilon"]
    ]

    entries = _ok(client.get(f"{u}/ledger", params={"limit": 1000}))
    assert entries["total"] == one["entries"] == len(entries["entries"])
    rows = list(csv.DictReader(io.StringIO(client.get(f"{u}/ledger?format=csv").text)))
    lines = client.get(f"{u}/ledger?format=jsonl").text.splitlines()
    assert len(rows) == len(lines) == one["entries"]
    counts: dict[str, dict[str, int]] = {}
    for e in entries["entries"]:
        c = counts.setdefault(e["kind"], {"entries": 0, "count": 0})
        c["entries"] += 1
        c["count"] += e["count"]
    got = {
        k: {"entries": v["entries"], "count": v["count"]}
        for k, v in one["mechanism_counts"].items()
    }
    assert got == counts

    series = _ok(client.get(f"{u}/series"))
    assert series["entries"] == one["entries"]
    if entries["entries"]:
        newest = entries["entries"][0]
        assert json.loads(lines[-1]) == newest
        assert rows[-1]["spent_epsilon"] == (
            "" if newest["spent_epsilon"] is None else repr(newest["spent_epsilon"])
        )
        last = series["points"][-1]
        assert (last["seq"], last["epsilon"]) == (newest["seq"], newest["spent_epsilon"])
        if last["epsilon"] != spent["epsilon"]:  # only at another budget delta, then listed
            changed = [
                c
                for c in series["budget_changes"]
                if c["old"] and c["new"] and c["old"]["delta"] != c["new"]["delta"]
            ]
            assert changed, (last, spent)

    held = one["reserved"]["count"] if one["reserved"] else 0
    active = _ok(client.get(f"{u}/reservations"))["reservations"]
    assert len(active) == held
    gauges = _gauges(client, ds_id)
    if one["archived"]:
        assert gauges == {}
    else:
        shown = spent["epsilon"] if spent["epsilon"] is not None else math.inf
        assert gauges["spent_epsilon"] == shown
        assert gauges["budget_epsilon"] == one["budget"]["epsilon"]
        assert gauges["active_holds"] == held

    with _library(client) as lib:
        assert lib.dataset(ds_id).raw == one
        b = lib.budget(ds_id)
        assert (b.spent.epsilon, b.remaining.epsilon, b.exhausted, b.entries) == (
            spent["epsilon"],
            one["remaining"]["epsilon"],
            one["exhausted"],
            one["entries"],
        )
    if not cli:
        return one
    status = cli_json("status", ds_id)
    added = status.pop("epsilon_added", None)
    assert status == one
    if added is not None and entries["entries"]:  # in ledger order: they add up to the last entry
        assert math.isclose(sum(added.values()), entries["entries"][0]["spent_epsilon"] or 0.0)
    assert cli_json("budget", ds_id) == budget
    return one


def test_reserved_epsilon_is_null_when_the_spend_is_not_finite(client: TestClient) -> None:
    """The spend with the holds minus the spend without, null "where either is not finite"
    (``Reserved.epsilon``): both infinite was 0.0, the difference inf - inf (nan) clamped, as
    if the holds added nothing. On a dataset and on a block (and an allocation's block)."""
    ds = new_dataset(client, "own-deltas", budget={"epsilon": 4.0, "delta": 1e-5}, adaptive=False)
    u = f"/v1/datasets/{ds['id']}"
    _ok(client.post(f"{u}/charges", json={"mechanism": GAUSS}))
    _ok(client.post(f"{u}/charges", json={"mechanism": OWN_DELTA}))
    _ok(client.post(f"{u}/reservations", json={"mechanism": GAUSS, "ttl_seconds": 600}))
    _ok(client.patch(u, json={"budget": {"delta": 1e-6}}))  # the entries' deltas reach it
    one = _ok(client.get(u))
    assert one["spent"]["epsilon"] is None
    assert one["reserved"]["count"] == 1 and one["reserved"]["epsilon"] is None
    assert _ok(client.get(f"{u}/budget"))["reserved"] == one["reserved"]

    part = new_dataset(
        client,
        "own-deltas-per-day",
        budget={"epsilon": 4.0, "delta": 1e-5},
        adaptive=False,
        partition={"unit": "day"},
    )
    u = f"/v1/datasets/{part['id']}"
    _ok(
        client.post(
            f"{u}/allocations", json={"name": "a", "budget": {"epsilon": 4.0, "delta": 1e-5}}
        )
    )
    day = {"blocks": {"from": "2026-11-01", "to": "2026-11-01"}, "allocation": "a"}
    _ok(client.post(f"{u}/charges", json={"mechanism": OWN_DELTA, **day}))
    _ok(client.post(f"{u}/reservations", json={"mechanism": GAUSS, "ttl_seconds": 600, **day}))
    _ok(client.patch(u, json={"budget": {"delta": 1e-6}}))
    _ok(client.patch(f"{u}/allocations/a", json={"budget": {"delta": 1e-6}}))
    span = {"from": "2026-11-01", "to": "2026-11-01"}
    for query in (span, {**span, "allocation": "a"}):
        [block] = _ok(client.get(f"{u}/blocks", params=query))["blocks"]
        assert block["spent"]["epsilon"] is None
        assert block["reserved"]["count"] == 1 and block["reserved"]["epsilon"] is None, query
    allocation = _ok(client.get(f"{u}/allocations/a"))
    assert allocation["reserved"]["epsilon"] is None


def _charge(client: TestClient, u: str, mechanism: dict[str, Any], code: int = 201) -> Any:
    r = client.post(f"{u}/charges", json={"mechanism": mechanism})
    assert r.status_code == code, r.text
    return r.json()


def _hold(client: TestClient, u: str) -> str:
    return str(
        _ok(client.post(f"{u}/reservations", json={"mechanism": GAUSS, "ttl_seconds": 600}))["id"]
    )


@pytest.mark.parametrize("kind", list(KINDS))
def test_every_surface_agrees_in_every_state(
    client: TestClient, cli_json: Any, db_url: str, kind: str
) -> None:
    """One dataset of each accounting through the states a dataset can be in, every surface
    compared in each (``assert_surfaces_agree``)."""
    own = kind in ("rdp", "zcdp", "pld")
    split = {"entry_delta_budget": 2e-6} if kind in ("rdp-adaptive", "zcdp-adaptive") else {}
    ds = new_dataset(client, kind, budget={"epsilon": 4.0, "delta": 1e-5}, **KINDS[kind], **split)
    u = f"/v1/datasets/{ds['id']}"

    def check(cli: bool = False) -> dict[str, Any]:
        return assert_surfaces_agree(client, cli_json, ds["id"], cli=cli)

    assert check()["spent"]["epsilon"] == 0.0
    for mechanism in [GAUSS] if kind == "gdp" else [GAUSS, LAPLACE, KRR]:
        _charge(client, u, mechanism)
    if own or split:
        _charge(client, u, OWN_DELTA)
    check(cli=True)
    hold = _hold(client, u)
    assert check(cli=True)["reserved"]["count"] == 1
    refused = _charge(client, u, GREEDY, 409)
    assert refused["spent"] == check()["spent"]
    _ok(client.post(f"/v1/reservations/{hold}/commit"))
    check()
    _ok(client.delete(f"/v1/reservations/{_hold(client, u)}"))
    assert check()["reserved"] is None
    _hold(client, u)
    expire_active_holds(db_url)  # due, not yet swept: still counted where admission counts it
    assert check()["reserved"]["count"] == 1
    _ok(client.patch(u, json={"budget": {"epsilon": 8.0, "delta": 1e-4}}))  # settles the hold
    raised = check()
    assert raised["reserved"] is None and not raised["exhausted"]
    _ok(client.patch(u, json={"budget": {"epsilon": 0.5, "delta": 5e-6}}))
    assert check(cli=True)["exhausted"]
    _ok(client.post(f"{u}/archive"))
    assert check()["archived"]
    _ok(client.post(f"{u}/unarchive"))
    before = check()
    report = _ok(client.post("/v1/admin/verify", params={"rebuild": "true"}))
    assert report["ok"], report
    assert check() == before


SPANS = {
    "day": (
        "2026-10-30",
        "2026-11-03",
        [("2026-10-30", "2026-11-01"), ("2026-11-01", "2026-11-02")],
    ),
    "week": ("2026-W52", "2027-W02", [("2026-W52", "2026-W53"), ("2026-W53", "2027-W01")]),
    "month": ("2026-11", "2027-02", [("2026-11", "2026-12"), ("2026-12", "2027-01")]),
}


def assert_structures_agree(client: TestClient, ds_id: str, first: str, last: str) -> None:
    """A partitioned dataset's blocks, its /budget summary, its allocations and the ledger's
    block and allocation filters against each other."""
    u = f"/v1/datasets/{ds_id}"
    one = assert_surfaces_agree(client, None, ds_id, cli=False)
    budget = _ok(client.get(f"{u}/budget"))
    blocks = _ok(client.get(f"{u}/blocks", params={"from": first, "to": last}))["blocks"]
    summary = budget["blocks"]
    assert summary["charged_blocks"] == sum(b["entries"] > 0 for b in blocks)
    assert summary["exhausted_blocks"] == sum(b["exhausted"] for b in blocks)
    assert summary["most_spent"] in blocks
    for b in blocks:
        covering = _ok(client.get(f"{u}/ledger", params={"block": b["block"], "limit": 1000}))
        assert len(covering["entries"]) == b["entries"], b["block"]
    lifetime = budget["lifetime"]
    assert lifetime["spent"] == one["spent"] and lifetime["exhausted"] == one["exhausted"]
    assert lifetime["remaining"] == one["remaining"]
    gauges = _gauges(client, ds_id)
    assert gauges["fraction_used"] == one["spent"]["epsilon"] / one["lifetime_budget"]["epsilon"]
    listed = _ok(client.get(f"{u}/allocations"))["allocations"]
    for a in listed:
        assert _ok(client.get(f"{u}/allocations/{a['name']}")) == a
        charged = _ok(client.get(f"{u}/ledger", params={"allocation": a["name"], "limit": 1000}))
        assert len(charged["entries"]) == a["entries"]
        shares = _ok(
            client.get(f"{u}/blocks", params={"from": first, "to": last, "allocation": a["name"]})
        )["blocks"]
        if a["most_spent_block"] is None:
            assert all(s["entries"] == 0 and s["reserved"] is None for s in shares)
        else:  # its spend is its most-spent block's
            [top] = [s for s in shares if s["block"] == a["most_spent_block"]]
            for k in ("spent", "remaining", "exhausted"):
                assert top[k] == a[k], k


@pytest.mark.parametrize("unit", list(SPANS))
def test_blocks_allocations_and_the_ledger_agree(client: TestClient, unit: str) -> None:
    """Charges spanning several blocks (across a year's end), an allocation exhausted and one
    not, a hold, a 409 and a lowered per-block budget, per unit (UTC keys)."""
    first, last, spans = SPANS[unit]
    ds = new_dataset(
        client,
        f"per-{unit}",
        budget={"epsilon": 4.0, "delta": 1e-5},
        partition={"unit": unit},
        lifetime_budget={"epsilon": 6.0, "delta": 1e-5},
    )
    u = f"/v1/datasets/{ds['id']}"
    for name, eps in (("small", 0.5), ("large", 3.0)):
        body = {"name": name, "budget": {"epsilon": eps, "delta": 1e-6}}
        _ok(client.post(f"{u}/allocations", json=body))
    for a, b in spans:
        span = {"blocks": {"from": a, "to": b}}
        _ok(client.post(f"{u}/charges", json={"mechanism": GAUSS, **span}))
        _ok(client.post(f"{u}/charges", json={"mechanism": LAPLACE, "allocation": "large", **span}))
    day = {"blocks": {"from": spans[0][0], "to": spans[0][0]}, "allocation": "small"}
    _ok(
        client.post(
            f"{u}/charges", json={"mechanism": {"mechanism": "laplace", "epsilon": 0.5}, **day}
        )
    )
    assert _ok(client.get(f"{u}/allocations/small"))["exhausted"]
    hold = {
        "mechanism": GAUSS,
        "ttl_seconds": 600,
        "allocation": "large",
        "blocks": {"from": spans[1][0], "to": spans[1][1]},
    }
    _ok(client.post(f"{u}/reservations", json=hold))
    refused = client.post(f"{u}/charges", json={"mechanism": GREEDY, **day})
    assert refused.status_code == 409, refused.text
    assert_structures_agree(client, ds["id"], first, last)
    _ok(client.patch(u, json={"budget": {"epsilon": 0.3, "delta": 1e-6}}))  # below each block's
    assert_structures_agree(client, ds["id"], first, last)
