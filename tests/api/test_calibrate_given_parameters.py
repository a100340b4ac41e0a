"""``GET /calibrate`` holds every parameter it is given in its answer, or refuses it (422 naming
it) - h3 finding 8: it dropped some and answered without them. A gaussian ``sigma=3`` was
ignored; a DP-SGD ``sigma`` with a sample rate (the "most steps" question) got a sigma for one
step; a Laplace ``sensitivity`` vanished from an epsilon answer; ``epsilon``, ``scale`` and
``rho`` are no query parameters of the route and were dropped unread, as was any typo.

Which parameter calibration solves for, which fields a kind has and the forms of its mechanism
object come from the registry (``app/accounting/kinds``), so every kind is covered; SQLite and
PostgreSQL through the ``client`` fixture.
"""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from privacy_ledger_client import InvalidRequest, LedgerClient

from app.accounting.registry import calibration_parameters, kind_names, spec
from tests.conftest import ADMIN_KEY, new_dataset
from tests.kind_examples import calibrations


@pytest.fixture
def db_url(sqlite_url: str) -> str:
    """SQLite only (``client`` builds on it): what is tested here is which parameters the
    calibration holds or refuses, decided before and apart from any database access."""
    return sqlite_url


BUDGET = {"epsilon": 2.0, "delta": 1e-6}

SOLVED = [(kind, p) for kind, params in calibration_parameters().items() for p in params]


def _needs(kind: str, parameter: str) -> dict[str, Any]:
    """What a calibration of ``kind`` for ``parameter`` needs besides it: the required fields of
    the first case the kind declares for it (``KindSpec.examples``)."""
    fixed = next(f for p, f in calibrations(kind) if p == parameter)
    return {k: v for k, v in fixed.items() if spec(kind).param(k).required}


def _value(parameter: str) -> Any:
    return 5 if parameter == "steps" else 0.5


@pytest.fixture
def ds(client: TestClient) -> str:
    made: dict[str, Any] = new_dataset(client, budget=BUDGET, adaptive=False)
    return str(made["id"])


def _calibrate(client: TestClient, ds: str, **params: Any) -> Any:
    return client.get(f"/v1/datasets/{ds}/calibrate", params=params)


def _refused(client: TestClient, ds: str, **params: Any) -> str:
    r = _calibrate(client, ds, **params)
    assert r.status_code == 422, r.text
    detail: str = r.json()["detail"]
    return detail


@pytest.mark.parametrize(("kind", "parameter"), SOLVED, ids=[f"{k}-{p}" for k, p in SOLVED])
def test_the_parameter_solved_for_is_refused_when_given(
    client: TestClient, ds: str, kind: str, parameter: str
) -> None:
    needs = _needs(kind, parameter)
    assert _calibrate(client, ds, mechanism=kind, parameter=parameter, **needs).status_code == 200
    given = {parameter: _value(parameter)}
    asked = [{"parameter": parameter}]
    if parameter == next(iter(calibration_parameters()[kind])):
        asked.append({})  # the default parameter, not named
    for ask in asked:
        detail = _refused(client, ds, mechanism=kind, **ask, **needs, **given)
        assert detail.startswith(f"'{parameter}' is the parameter calibration solves for"), detail


def test_a_dp_sgd_sigma_points_to_the_steps_question(client: TestClient, ds: str) -> None:
    detail = _refused(client, ds, mechanism="subsampled_gaussian", sample_rate=0.01, sigma=1.1)
    assert detail == (
        "'sigma' is the parameter calibration solves for: leave it out, or ask parameter=steps "
        "to solve for steps with sigma fixed"
    )
    steps = _calibrate(client, ds, mechanism="subsampled_gaussian", parameter="steps",
                       sample_rate=0.01, sigma=1.1).json()  # fmt: skip
    assert steps["parameter"] == "steps" and steps["mechanism"]["sigma"] == 1.1


@pytest.mark.parametrize(
    ("params", "detail"),
    [
        ({"sensitivity": 2.0}, "'sensitivity' belongs to the scale + sensitivity form of laplace, "
         "and calibrating epsilon answers in its epsilon form: leave sensitivity out, or ask "
         "parameter=scale, which answers with this sensitivity"),
        ({"parameter": "epsilon", "sensitivity": 2.0}, "'sensitivity' belongs to the scale"),
        ({"scale": 2.0}, "'scale' belongs to the scale + sensitivity form of laplace, and "
         "calibrating epsilon answers in its epsilon form: leave scale out, or ask "
         "parameter=scale to calibrate scale"),
        ({"parameter": "scale", "epsilon": 0.5}, "'epsilon' belongs to the epsilon form of "
         "laplace, and calibrating scale answers in its scale + sensitivity form: leave epsilon "
         "out, or ask parameter=epsilon to calibrate epsilon"),
        ({"parameter": "scale", "sensitivity": 2.0, "epsilon": 0.5}, "'epsilon' belongs to"),
    ],
    ids=["sensitivity", "epsilon-sensitivity", "scale", "scale-epsilon", "scale-both"],
)  # fmt: skip
def test_a_laplace_field_of_the_other_form_is_refused(
    client: TestClient, ds: str, params: dict[str, Any], detail: str
) -> None:
    """A Laplace epsilon holds for any sensitivity (scale = sensitivity / epsilon): the API
    answers a scale only when asked for one (parameter=scale), so a sensitivity given with
    an epsilon calibration is refused rather than turned into an answer nobody documented."""
    assert detail in _refused(client, ds, mechanism="laplace", **params)


def test_a_laplace_scale_holds_the_sensitivity_given(client: TestClient, ds: str) -> None:
    answer = _calibrate(client, ds, mechanism="laplace", parameter="scale", sensitivity=2.0).json()
    epsilon = _calibrate(client, ds, mechanism="laplace").json()
    assert answer["mechanism"] == {"mechanism": "laplace", "scale": answer["value"],
                                   "sensitivity": 2.0, "count": 1}  # fmt: skip
    assert 2.0 / answer["value"] == pytest.approx(epsilon["value"], rel=1e-6)


def test_a_laplace_scale_without_a_sensitivity_is_answered_in_the_scale_form(
    client: TestClient, ds: str
) -> None:
    """h1 finding 4: without a sensitivity the answer's mechanism was in the epsilon form,
    without the ``scale`` solved for. It is in the scale form (sensitivity 1, the default),
    and charging it is what calibration says: admitted, and a step less noise refused."""
    answer = _calibrate(client, ds, mechanism="laplace", parameter="scale").json()
    epsilon = _calibrate(client, ds, mechanism="laplace").json()
    m = answer["mechanism"]
    assert answer["parameter"] == "scale"
    assert m == {"mechanism": "laplace", "scale": answer["value"], "sensitivity": 1.0, "count": 1}
    assert 1.0 / answer["value"] == pytest.approx(epsilon["value"], rel=1e-6)
    url = f"/v1/datasets/{ds}/charges"
    assert client.post(url, params={"dry_run": "true"}, json={"mechanism": m}).status_code == 200
    less = {**m, "scale": m["scale"] * (1 - 1e-6)}
    assert client.post(url, params={"dry_run": "true"}, json={"mechanism": less}).status_code == 409


CALIBRATED = [k for k, p in calibration_parameters().items() if p]
NAMES = sorted({p.name for k in kind_names() for p in spec(k).params} | {"sensitivty", "foo"})
VALID = {"steps": "5", "k": "3", "count": "2", "delta": "1e-8", "orders": "2", "epsilons": "1"}
"""A value each name's query parameter (where the route has one) takes."""


@pytest.mark.parametrize("kind", CALIBRATED)
def test_a_parameter_the_kind_does_not_have_is_refused(
    client: TestClient, ds: str, kind: str
) -> None:
    """Every name a kind does not have (the route's other query parameters, the fields of other
    kinds, which the route does not read, and a typo)."""
    fields = [p.name for p in spec(kind).params]
    parameter = next(iter(calibration_parameters()[kind]))
    for name in NAMES:
        if name in fields:
            continue
        given = {name: VALID.get(name, "0.5")}
        detail = _refused(client, ds, mechanism=kind, **_needs(kind, parameter), **given)
        assert detail == f"{kind} has no parameter {name!r} (its parameters: {', '.join(fields)})"


FIXED = [(kind, parameter, fixed) for kind in CALIBRATED for parameter, fixed in calibrations(kind)]
"""Every calibration of every kind with the other parameters it declares for it (extremes and
a count included)."""


@pytest.mark.parametrize(
    ("kind", "parameter", "fixed"), FIXED, ids=[f"{k}-{p}-{f}" for k, p, f in FIXED]
)
def test_every_parameter_given_is_in_the_answer(
    client: TestClient, kind: str, parameter: str, fixed: dict[str, Any]
) -> None:
    """(On the budget of tests/unit/test_calibration.py's empty-ledger cases, which every
    declared case answers: a Gaussian of sensitivity 1e12 needs more than epsilon 2.)"""
    made = new_dataset(client, budget={"epsilon": 8.5, "delta": 7e-7}, adaptive=False)
    ds = str(made["id"])
    r = _calibrate(client, ds, mechanism=kind, parameter=parameter, **fixed)
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["parameter"] == parameter
    assert {k: answer["mechanism"][k] for k in fixed} == fixed
    # the answer is ready to charge, and is admitted
    charged = client.post(f"/v1/datasets/{ds}/charges", json={"mechanism": answer["mechanism"]})
    assert charged.status_code == 201, charged.text


def test_the_dashboards_calibrations_send_nothing_refused(client: TestClient, ds: str) -> None:
    """The dashboard's "what can the next query be" asks each kind with the query the kind
    declares (``KindSpec.next_query``, served by GET /v1/mechanisms): every one answers (its
    Laplace row sent sensitivity=1, which was dropped and is now refused)."""
    kinds = client.get("/v1/mechanisms").json()["mechanisms"]
    offered = {k["name"]: k["next_query"] for k in kinds if k["next_query"] and k["calibration"]}
    assert set(offered) == {name for name in CALIBRATED if spec(name).next_query is not None}, (
        "every kind the dashboard can calibrate is offered"
    )
    for kind, next_query in offered.items():
        assert next_query == {
            "fixed": dict(spec(kind).next_query.fixed),  # type: ignore[union-attr]
            "words": spec(kind).next_query.words,  # type: ignore[union-attr]
        }
        r = client.get(
            f"/v1/datasets/{ds}/calibrate", params={"mechanism": kind, **next_query["fixed"]}
        )
        assert r.status_code == 200, (kind, r.text)
        assert r.json()["parameter"] == next_query["fixed"].get(
            "parameter", next(iter(spec(kind).calibration))
        )


def test_the_clients_calibrate_sends_only_what_it_is_given(client: TestClient, ds: str) -> None:
    """The client's helper (the CLI's too, tests/cli) adds nothing to what it is given: the
    documented calls answer, and a refused parameter is the client's InvalidRequest."""
    with LedgerClient("http://testserver", ADMIN_KEY, transport=client._transport) as c:
        assert c.calibrate(ds, "gaussian", sensitivity=1.0).mechanism["sensitivity"] == 1.0
        steps = c.calibrate(ds, "subsampled_gaussian", "steps", sigma=2.0, sample_rate=0.005)
        assert steps.parameter == "steps" and steps.mechanism["sigma"] == 2.0
        scale = c.calibrate(ds, "laplace", "scale", sensitivity=2.0)
        assert scale.mechanism["sensitivity"] == 2.0
        with pytest.raises(InvalidRequest) as refused:
            c.calibrate(ds, "laplace", sensitivity=2.0)
        assert "parameter=scale" in refused.value.detail
