"""Issue 12 through the service: every kind of the registry is accepted by charges, dry runs,
reservations, compose and calibrate, on ``rdp``, ``zcdp`` and ``pld`` datasets (SQLite and
PostgreSQL through the ``client`` fixture).

Expected figures come from the accounting core's own pieces (each tested against independent
oracles in tests/unit): the mechanism's curve (``mechanism_from_dict``), the filter's spend
(``Filter.create(...).spend``) and the composed PLD (``pld_mechanisms.compose_all``).
"""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.accounting import pld_mechanisms as pm
from app.accounting.filters import Budget, Filter, FilterKind
from app.accounting.kinds import KindSpec
from app.accounting.mechanisms import mechanism_from_dict
from app.accounting.registry import calibration_parameters, kind_names, spec
from app.errors import Unprocessable
from app.principal import SYSTEM
from app.responses import DryRun
from app.services import charges
from tests.conftest import new_dataset

BUDGET = {"epsilon": 2.0, "delta": 1e-6}

NEW_KINDS: dict[str, dict[str, Any]] = {
    "pure_dp": {"mechanism": "pure_dp", "epsilon": 0.1},
    "exponential": {"mechanism": "exponential", "epsilon": 0.2, "count": 2},
    "zcdp": {"mechanism": "zcdp", "rho": 0.01},
    "rdp": {
        "mechanism": "rdp",
        "orders": [2, 4, 8, 16, 32],
        "epsilons": [0.01, 0.02, 0.05, 0.1, 0.3],
    },
    "approx_dp": {"mechanism": "approx_dp", "epsilon": 0.1, "delta": 1e-8},
    "subsampled_gaussian": {
        "mechanism": "subsampled_gaussian",
        "sigma": 2.4,
        "sensitivity": 2.0,
        "sample_rate": 0.01,
        "steps": 100,
    },
}
WITH_OWN_DELTA: dict[str, dict[str, Any]] = {
    "approx_dp": NEW_KINDS["approx_dp"],
    "zcdp": {"mechanism": "zcdp", "rho": 0.01, "delta": 1e-9},
    "rdp": {**NEW_KINDS["rdp"], "delta": 1e-9},
}
NO_PLD = {k for k in kind_names() if spec(k).pld is None}


def _charge(client: TestClient, ds: dict, mechanism: dict, **params: Any) -> Any:
    return client.post(
        f"/v1/datasets/{ds['id']}/charges", json={"mechanism": mechanism}, params=params
    )


def _budget(ds: dict) -> Budget:
    return Budget(ds["budget"]["epsilon"], ds["budget"]["delta"])


def test_every_kind_of_the_registry_is_in_the_openapi_document(client: TestClient) -> None:
    doc = client.get("/openapi.json").json()
    schemas = doc["components"]["schemas"]
    charge = schemas["ChargeIn"]["properties"]["mechanism"]
    mapping = charge["discriminator"]["mapping"]
    assert sorted(mapping) == sorted(kind_names())
    for kind in kind_names():
        model = schemas[mapping[kind].rsplit("/", 1)[-1]]
        assert model["additionalProperties"] is False
        assert spec(kind).description in model["description"]
        for p in spec(kind).params:
            field = model["properties"][p.name]
            described = field.get("description") or field["anyOf"][0]["description"]
            assert p.help in described
            if p.unit:
                assert p.unit in described
        # integer fields stay integers
        for p in spec(kind).params:
            if p.type == "int":
                assert model["properties"][p.name]["type"] == "integer"
    allowed = schemas["DatasetIn"]["properties"]["allowed_mechanisms"]["anyOf"][0]["items"]
    assert sorted(allowed["enum"]) == sorted(kind_names())
    calibrate = next(
        p
        for p in doc["paths"]["/v1/datasets/{dataset_id}/calibrate"]["get"]["parameters"]
        if p["name"] == "mechanism"
    )
    assert sorted(calibrate["schema"]["enum"]) == sorted(
        k for k, params in calibration_parameters().items() if params
    )


@pytest.mark.parametrize("kind", sorted(NEW_KINDS))
def test_each_new_kind_is_charged_on_a_fixed_parameter_rdp_dataset(
    client: TestClient, kind: str
) -> None:
    ds = new_dataset(client, budget=BUDGET, adaptive=False)
    wire = NEW_KINDS[kind]
    r = _charge(client, ds, wire)
    assert r.status_code == 201, r.text
    curve = mechanism_from_dict(wire).curve()
    entry = r.json()["entry"]
    assert entry["kind"] == kind and entry["count"] == wire.get("count", 1)
    expected = Filter.create(FilterKind.RDP, _budget(ds)).spend(curve)
    assert r.json()["spent"]["epsilon"] == pytest.approx(expected.epsilon, rel=1e-9)
    if curve.rho == float("inf"):
        assert entry["rho"] is None
    else:
        assert entry["rho"] == pytest.approx(curve.rho, rel=1e-12)
    ledger = client.get(f"/v1/datasets/{ds['id']}/ledger").json()
    stored = ledger["entries"][0]["mechanism"]
    assert mechanism_from_dict(stored) == mechanism_from_dict(wire)


@pytest.mark.parametrize("kind", sorted(NEW_KINDS))
def test_each_new_kind_on_a_zcdp_dataset(client: TestClient, kind: str) -> None:
    ds = new_dataset(client, budget=BUDGET, accounting="zcdp", adaptive=False)
    wire = NEW_KINDS[kind]
    curve = mechanism_from_dict(wire).curve()
    r = _charge(client, ds, wire)
    f = Filter.create(FilterKind.ZCDP, _budget(ds))
    if f.admits(curve):
        assert r.status_code == 201, r.text
        assert r.json()["spent"]["rho"] == pytest.approx(curve.rho, rel=1e-12)
        assert r.json()["spent"]["epsilon"] == pytest.approx(f.spend(curve).epsilon, rel=1e-9)
    elif curve.rho == float("inf"):  # RDP at a few orders: never admissible by rho
        assert kind == "rdp"
        assert r.status_code == 422, r.text
        assert "no finite zCDP bound" in r.json()["detail"]
        assert r.json()["accepted_accountings"] == ["rdp"]
        assert client.get("/v1/rejections").json()["rejections"] == []
    else:  # rho without amplification by subsampling (DP-SGD): over this budget
        assert kind == "subsampled_gaussian" and f.bound is not None and curve.rho > f.bound
        assert r.status_code == 409, r.text
    assert client.get(f"/v1/datasets/{ds['id']}/budget").json()["entries"] == (
        1 if r.status_code == 201 else 0
    )


@pytest.mark.parametrize("kind", sorted(NEW_KINDS))
def test_each_new_kind_on_a_pld_dataset(client: TestClient, kind: str) -> None:
    ds = new_dataset(client, budget=BUDGET, accounting="pld", adaptive=False)
    wire = NEW_KINDS[kind]
    r = _charge(client, ds, wire)
    if kind in NO_PLD:
        assert r.status_code == 422, r.text
        body = r.json()
        assert kind in body["detail"] and body["accepted_accountings"]
        for accounting in body["accepted_accountings"]:
            assert f"'{accounting}'" in body["detail"]
            assert accounting != "pld"
        assert client.get(f"/v1/datasets/{ds['id']}/budget").json()["entries"] == 0
        return
    assert r.status_code == 201, r.text
    stored = r.json()["entry"]["mechanism"]
    state = pm.compose_all([stored])
    spent = r.json()["spent"]
    by_pld = state.epsilon(BUDGET["delta"])
    if kind == "exponential":
        # the exact bounded-range RDP curve is tighter than the PLD of one exponential
        # mechanism (the PLD's dominating pair is worse than every single BR pair): the least
        # candidate answers
        assert spent["epsilon"] < by_pld and spent["method"] == "rdp_improved"
    else:
        assert spent["method"] == "pld"
        assert spent["epsilon"] == pytest.approx(by_pld, rel=1e-9)


@pytest.mark.parametrize("kind", sorted(WITH_OWN_DELTA))
def test_entries_with_their_own_delta_are_422_on_adaptive_filters(
    client: TestClient, kind: str
) -> None:
    wire = WITH_OWN_DELTA[kind]
    for accounting in ("rdp", "zcdp"):
        ds = new_dataset(client, f"adaptive-{accounting}", budget=BUDGET, accounting=accounting)
        assert ds["adaptive"] is True
        for path in ("charges", "reservations"):
            r = client.post(f"/v1/datasets/{ds['id']}/{path}", json={"mechanism": wire})
            assert r.status_code == 422, r.text
            body = r.json()
            assert "own delta" in body["detail"] and "adaptive: false" in body["detail"]
            assert body["filter"] == ds["filter"] and body["entry_delta"] > 0
        r = _charge(client, ds, wire, dry_run="true")
        assert r.status_code == 422, r.text
        # nothing recorded, not even a rejection
        assert client.get(f"/v1/datasets/{ds['id']}/budget").json()["entries"] == 0
        assert client.get("/v1/rejections").json()["rejections"] == []
        # the same kind without a delta of its own is admitted there (approx_dp always has one)
        if kind != "approx_dp":
            plain = {k: v for k, v in wire.items() if k != "delta"}
            if accounting == "rdp" or kind == "zcdp":
                assert _charge(client, ds, plain).status_code == 201
    # on a fixed-parameter dataset the entries' deltas add up
    ds = new_dataset(client, "fixed", budget=BUDGET, adaptive=False)
    for _ in (1, 2):
        r = _charge(client, ds, wire)
        assert r.status_code == 201, r.text
    curve = mechanism_from_dict(wire).curve()
    expected = Filter.create(FilterKind.RDP, _budget(ds)).spend(curve + curve)
    assert r.json()["spent"]["epsilon"] == pytest.approx(expected.epsilon, rel=1e-9)


def test_entry_deltas_reaching_the_budget_delta_are_refused(client: TestClient) -> None:
    ds = new_dataset(client, budget={"epsilon": 5.0, "delta": 1e-6}, adaptive=False)
    wire = {"mechanism": "approx_dp", "epsilon": 0.01, "delta": 4e-7}
    assert _charge(client, ds, wire).status_code == 201
    assert _charge(client, ds, wire).status_code == 201
    r = _charge(client, ds, wire)  # 1.2e-6 of entries' deltas alone: over the budget delta
    assert r.status_code == 409, r.text


@pytest.mark.parametrize("kind", sorted(NEW_KINDS))
def test_dry_runs_reservations_and_compose_take_every_new_kind(
    client: TestClient, kind: str
) -> None:
    ds = new_dataset(client, budget=BUDGET, adaptive=False)
    wire = NEW_KINDS[kind]
    dry = _charge(client, ds, wire, dry_run="true")
    assert dry.status_code == 200, dry.text
    assert dry.json()["admitted"] is True
    curve = mechanism_from_dict(wire).curve()
    f = Filter.create(FilterKind.RDP, _budget(ds))
    assert dry.json()["would_spend"]["epsilon"] == pytest.approx(f.spend(curve).epsilon, rel=1e-9)
    hold = client.post(f"/v1/datasets/{ds['id']}/reservations", json={"mechanism": wire})
    assert hold.status_code == 201, hold.text
    committed = client.post(f"/v1/reservations/{hold.json()['id']}/commit")
    assert committed.status_code in (200, 201), committed.text
    assert client.get(f"/v1/datasets/{ds['id']}/budget").json()["entries"] == 1
    for accounting, kind_ in (("rdp", FilterKind.RDP), ("zcdp", FilterKind.ZCDP)):
        body = {"mechanisms": [wire, wire], "delta": 1e-6, "accounting": accounting}
        r = client.post("/v1/accounting/compose", json=body)
        spent = Filter.create(kind_, Budget(1.0, 1e-6)).spend(curve + curve).epsilon
        if spent == float("inf"):  # RDP at a few orders has no zCDP bound: said, not inf
            assert kind == "rdp" and accounting == "zcdp"
            assert r.status_code == 422 and "no finite epsilon" in r.json()["detail"]
        else:
            assert r.status_code == 200, r.text
            assert r.json()["epsilon"] == pytest.approx(spent, rel=1e-9)
    pld = client.post(
        "/v1/accounting/compose", json={"mechanisms": [wire], "delta": 1e-6, "accounting": "pld"}
    )
    assert pld.status_code == (422 if kind in NO_PLD else 200), pld.text


def test_compose_says_when_the_own_deltas_reach_the_target_delta(client: TestClient) -> None:
    wire = {"mechanism": "zcdp", "rho": 0.0, "delta": 0.5}
    r = client.post("/v1/accounting/compose", json={"mechanisms": [wire], "delta": 1e-6})
    assert r.status_code == 422 and "own deltas" in r.json()["detail"]


def test_a_new_kind_not_allowed_on_a_dataset_is_422(client: TestClient) -> None:
    ds = new_dataset(client, budget=BUDGET, allowed_mechanisms=["pure_dp", "zcdp"])
    assert ds["allowed_mechanisms"] == ["pure_dp", "zcdp"]
    assert _charge(client, ds, NEW_KINDS["pure_dp"]).status_code == 201
    r = _charge(client, ds, NEW_KINDS["exponential"])
    assert r.status_code == 422 and "not allowed" in r.json()["detail"]


@pytest.mark.parametrize(
    ("kind", "fixed"),
    [
        ("pure_dp", {}),
        ("exponential", {"count": 3}),
        ("zcdp", {}),
        ("approx_dp", {"delta": 1e-8}),
        ("subsampled_gaussian", {"sample_rate": 0.01, "steps": 100, "sensitivity": 2.0}),
    ],
)
def test_calibrate_every_kind_with_a_parameter(
    client: TestClient, kind: str, fixed: dict[str, Any]
) -> None:
    ds = new_dataset(client, budget=BUDGET, adaptive=False)
    r = client.get(f"/v1/datasets/{ds['id']}/calibrate", params={"mechanism": kind, **fixed})
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["parameter"] == next(iter(calibration_parameters()[kind]))
    for name, value in fixed.items():
        assert answer["mechanism"][name] == value
    # the answer fits: charging it is admitted
    assert _charge(client, ds, answer["mechanism"]).status_code == 201


def test_calibrate_refuses_what_cannot_be_charged(client: TestClient) -> None:
    fixed = new_dataset(client, "fixed", budget=BUDGET, adaptive=False)
    r = client.get(f"/v1/datasets/{fixed['id']}/calibrate", params={"mechanism": "approx_dp"})
    assert r.status_code == 422 and "delta" in r.json()["detail"]
    adaptive = new_dataset(client, "adaptive", budget=BUDGET)
    r = client.get(
        f"/v1/datasets/{adaptive['id']}/calibrate",
        params={"mechanism": "approx_dp", "delta": 1e-8},
    )
    assert r.status_code == 422 and "own delta" in r.json()["detail"]
    r = client.get(f"/v1/datasets/{fixed['id']}/calibrate", params={"mechanism": "rdp"})
    assert r.status_code == 422


# --- GET /v1/mechanisms -------------------------------------------------------------------------


def test_the_mechanism_catalogue_is_the_registry(client: TestClient) -> None:
    scope = [new_dataset(client)["id"]]  # any key reads it, one scoped to a dataset too
    viewer = client.post("/v1/keys", json={"role": "viewer", "datasets": scope}).json()["key"]
    assert client.get("/v1/mechanisms", headers={"Authorization": ""}).status_code == 401
    r = client.get("/v1/mechanisms", headers={"Authorization": f"Bearer {viewer}"})
    assert r.status_code == 200, r.text
    kinds = {k["name"]: k for k in r.json()["mechanisms"]}
    assert sorted(kinds) == sorted(kind_names())
    for name, k in kinds.items():
        s = spec(name)
        assert k["description"] == s.description and k["neighbours"] == s.neighbours
        assert k["calibration"] == dict(s.calibration)
        assert [f["name"] for f in k["fields"]] == [p.name for p in s.params]
        for f, p in zip(k["fields"], s.params, strict=True):
            assert (f["type"], f["unit"], f["help"]) == (p.type, p.unit, p.help)
            assert (f["minimum"], f["maximum"]) == (p.minimum, p.maximum)
        assert k["pld"] == (name not in NO_PLD)
        assert k["own_delta"] == any(p.name == "delta" for p in s.params)
    # what it says about accountings is what a dataset of each accounting answers
    for name in NO_PLD:
        ds = new_dataset(client, f"pld-{name}", budget=BUDGET, accounting="pld", adaptive=False)
        refused = _charge(client, ds, NEW_KINDS[name]).json()
        assert refused["accepted_accountings"] == kinds[name]["accountings"]
    assert "PoissonSampledDpEvent" in r.json()["dp_events"]
    assert "GaussianDpEvent" in kinds["gaussian"]["dp_events"]


def test_a_kind_without_a_pld_builder_is_listed_and_refused_right(
    client: TestClient, toy_kind: KindSpec
) -> None:
    """A new kind declaring no PLD (a test-only one, in the registry for this test): listed
    as accepted under rdp and zcdp, refused on a pld dataset naming them, admitted on zcdp."""
    kinds = {k["name"]: k for k in client.get("/v1/mechanisms").json()["mechanisms"]}
    listed = kinds[toy_kind.name]
    assert listed["accountings"] == ["rdp", "zcdp"] and listed["pld"] is False
    assert listed["description"] == toy_kind.description
    db = client.app.state.db  # type: ignore[attr-defined]
    m = toy_kind.mechanism(scale=20.0, sensitivity=2)  # type: ignore[call-arg]
    pld = new_dataset(client, "toy-pld", budget=BUDGET, accounting="pld", adaptive=False)
    with pytest.raises(Unprocessable) as refused:
        charges.charge(db, SYSTEM, pld["id"], mechanism=m, wire=m.to_dict(), dry_run=True)
    assert list(refused.value.extra["accepted_accountings"]) == listed["accountings"]
    assert "'rdp' or 'zcdp'" in refused.value.detail and toy_kind.no_pld in refused.value.detail
    for accounting in listed["accountings"]:
        ds = new_dataset(client, f"toy-{accounting}", budget=BUDGET, accounting=accounting)
        admitted = charges.charge(db, SYSTEM, ds["id"], mechanism=m, wire=m.to_dict(), dry_run=True)
        assert isinstance(admitted, DryRun) and admitted.admitted
