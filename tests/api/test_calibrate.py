"""GET /calibrate: the answer fits (charging it is admitted) and 1 % further does not."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tests.conftest import new_dataset


@pytest.fixture
def db_url(sqlite_url: str) -> str:
    """SQLite only (``client`` builds on it): calibration reads the dataset state through the
    same services as every route, which tests/api run on both databases; what is tested here is
    the search and its answer."""
    return sqlite_url


FILTERS = {
    "rdp": {"accounting": "rdp", "adaptive": False},
    "rdp_fixed_orders": {"accounting": "rdp", "adaptive": True},
    "pld": {"accounting": "pld", "adaptive": False},
    "zcdp": {"accounting": "zcdp", "adaptive": False},
    "zcdp_filter": {"accounting": "zcdp", "adaptive": True},
    "gdp": {"allowed_mechanisms": ["gaussian"]},
}
CASES = [
    ("gaussian", {"sensitivity": 2.0}, "sigma", 0.99),
    ("laplace", {}, "epsilon", 1.01),
    # (the scale was 409 on every dataset: the cheap end of its range is no mechanism at all)
    ("laplace", {"parameter": "scale", "sensitivity": 1.0}, "scale", 0.99),
    ("randomized_response", {"k": 5}, "epsilon", 1.01),
    ("rappor", {}, "epsilon", 1.01),
    ("discrete_laplace", {"sensitivity": 2}, "epsilon", 1.01),
]


def _dry(client: TestClient, ds: dict, mechanism: dict) -> int:
    return client.post(
        f"/v1/datasets/{ds['id']}/charges",
        params={"dry_run": "true"},
        json={"mechanism": mechanism},
    ).status_code


@pytest.mark.parametrize("filt", sorted(FILTERS))
@pytest.mark.parametrize(
    ("kind", "fixed", "param", "factor"), CASES, ids=[c[2] + "-" + c[0] for c in CASES]
)
def test_answer_fits_and_one_percent_more_does_not(
    client: TestClient, filt: str, kind: str, fixed: dict, param: str, factor: float
) -> None:
    ds = new_dataset(client, budget={"epsilon": 2.0, "delta": 1e-6}, **FILTERS[filt])
    assert ds["filter"] == filt
    prior = (
        {"mechanism": "gaussian", "sigma": 20.0}
        if filt == "gdp"
        else {"mechanism": "laplace", "epsilon": 0.2}
    )
    assert (
        client.post(f"/v1/datasets/{ds['id']}/charges", json={"mechanism": prior}).status_code
        == 201
    )
    r = client.get(f"/v1/datasets/{ds['id']}/calibrate", params={"mechanism": kind, **fixed})
    if filt == "gdp" and kind != "gaussian":
        assert r.status_code == 422 and "not allowed" in r.json()["detail"]
        return
    assert r.status_code == 200, r.text
    answer = r.json()
    m = answer["mechanism"]
    assert answer["parameter"] == param and m["mechanism"] == kind and m[param] == answer["value"]
    for k, v in fixed.items():
        assert k == "parameter" or m[k] == v
    assert _dry(client, ds, m) == 200
    if filt == "pld":
        # searched by the curve rule, then moved as far as the PLD admits (a bounded search):
        # it fits, and it is never short of what the curve rule alone allows
        rdp = new_dataset(
            client, "rdp-twin", budget={"epsilon": 2.0, "delta": 1e-6}, adaptive=False
        )
        client.post(f"/v1/datasets/{rdp['id']}/charges", json={"mechanism": prior})
        twin = client.get(
            f"/v1/datasets/{rdp['id']}/calibrate", params={"mechanism": kind, **fixed}
        )
        if answer["direction"] == "min":
            assert answer["value"] <= twin.json()["value"]
        else:
            assert answer["value"] >= twin.json()["value"]
        return
    assert _dry(client, ds, {**m, param: answer["value"] * factor}) == 409
    assert answer["spent_after"]["epsilon"] <= 2.0


@pytest.mark.parametrize("filt", ["rdp", "rdp_fixed_orders", "pld"])
def test_dp_sgd_sigma_and_steps(client: TestClient, filt: str) -> None:
    ds = new_dataset(client, budget={"epsilon": 3.0, "delta": 1e-5}, **FILTERS[filt])
    r = client.get(
        f"/v1/datasets/{ds['id']}/calibrate",
        params={"mechanism": "subsampled_gaussian", "sample_rate": 0.01, "steps": 500},
    )
    m = r.json()["mechanism"]
    assert r.json()["parameter"] == "sigma" and m["steps"] == 500 and m["sample_rate"] == 0.01
    assert _dry(client, ds, m) == 200
    if filt != "pld":  # a pld dataset's answer is confirmed by its PLD, conservatively
        assert _dry(client, ds, {**m, "sigma": m["sigma"] * 0.99}) == 409
    r = client.get(
        f"/v1/datasets/{ds['id']}/calibrate",
        params={
            "mechanism": "subsampled_gaussian",
            "parameter": "steps",
            "sample_rate": 0.01,
            "sigma": 1.2,
        },
    )
    m = r.json()["mechanism"]
    assert isinstance(r.json()["value"], int) and m["steps"] == r.json()["value"]
    assert _dry(client, ds, m) == 200
    if filt != "pld":
        assert _dry(client, ds, {**m, "steps": m["steps"] + 1}) == 409


def test_reservations_count_and_exhausted_is_409(client: TestClient) -> None:
    ds = new_dataset(client, budget={"epsilon": 1.0, "delta": 1e-6}, adaptive=False)
    free = client.get(f"/v1/datasets/{ds['id']}/calibrate", params={"mechanism": "laplace"}).json()[
        "value"
    ]
    client.post(
        f"/v1/datasets/{ds['id']}/reservations",
        json={"mechanism": {"mechanism": "laplace", "epsilon": 0.5}},
    )
    held = client.get(f"/v1/datasets/{ds['id']}/calibrate", params={"mechanism": "laplace"}).json()[
        "value"
    ]
    assert held < free
    # the pure-DP sum of the default (adaptive) filter reaches the budget exactly: nothing fits
    full = new_dataset(client, "full", budget={"epsilon": 1.0, "delta": 1e-6})
    assert (
        client.post(
            f"/v1/datasets/{full['id']}/charges",
            json={"mechanism": {"mechanism": "laplace", "epsilon": 1.0}},
        ).status_code
        == 201
    )
    assert client.get(f"/v1/datasets/{full['id']}").json()["exhausted"] is True
    for kind in ("gaussian", "laplace"):
        r = client.get(f"/v1/datasets/{full['id']}/calibrate", params={"mechanism": kind})
        assert r.status_code == 409 and r.json()["detail"]


def test_dp_sgd_calibrations_found_by_a_random_search(client: TestClient) -> None:
    """Two answers a random search of DP-SGD calibrations found wrong: a zcdp budget after a
    Laplace charge with sample rate 1 - 1e-12 (500: the answer fitted the search's window of
    orders and not the full curve, their rho an ulp apart), and a sample rate of 1 (the
    Gaussian mechanism) answered with 6.5 % more noise than the Gaussian needs."""
    zcdp = new_dataset(
        client, "zcdp-edge", budget={"epsilon": 100.0, "delta": 1e-9}, **FILTERS["zcdp"]
    )
    laplace = {"mechanism": "laplace", "epsilon": 2.9}
    assert (
        client.post(f"/v1/datasets/{zcdp['id']}/charges", json={"mechanism": laplace}).status_code
        == 201
    )
    r = client.get(
        f"/v1/datasets/{zcdp['id']}/calibrate",
        params={"mechanism": "subsampled_gaussian", "sample_rate": 0.999999999999, "steps": 10},
    )
    assert r.status_code == 200, r.text
    m = r.json()["mechanism"]
    assert _dry(client, zcdp, m) == 200
    assert _dry(client, zcdp, {**m, "sigma": m["sigma"] * 0.99}) == 409

    rdp = new_dataset(
        client, "every-record", budget={"epsilon": 3.0, "delta": 1e-6}, **FILTERS["rdp"]
    )
    url = f"/v1/datasets/{rdp['id']}/calibrate"
    dp_sgd = client.get(
        url, params={"mechanism": "subsampled_gaussian", "sample_rate": 1.0, "steps": 10}
    ).json()
    gaussian = client.get(url, params={"mechanism": "gaussian"}).json()
    assert dp_sgd["value"] == pytest.approx(gaussian["value"] * 10**0.5, rel=1e-8)
    m = dp_sgd["mechanism"]
    assert _dry(client, rdp, m) == 200
    assert _dry(client, rdp, {**m, "sigma": m["sigma"] * 0.99}) == 409


@pytest.mark.parametrize("how", ["reservations", "charges"])
def test_pld_gaussian_beside_a_non_gaussian_hold_is_searched_on_the_pld(
    client: TestClient, how: str
) -> None:
    """h1 finding 1: on a pld dataset the PLD search was skipped for a Gaussian on a Gaussian
    ledger (its curve rule is exact there), even with a non-Gaussian hold, which makes the
    rule a bound: sigma 6.1256 where admission takes 5.6824 (7.8 % more noise). Held or
    charged, the Laplace now gets the same bounded PLD search: the answer is admitted and 1 %
    less noise is refused (the least sigma admission takes is 0.51 % below the answer)."""
    ds = new_dataset(client, budget={"epsilon": 1.0, "delta": 1e-6}, **FILTERS["pld"])
    laplace = {"mechanism": "laplace", "epsilon": 0.3}
    r = client.post(f"/v1/datasets/{ds['id']}/{how}", json={"mechanism": laplace})
    assert r.status_code == 201, r.text
    r = client.get(f"/v1/datasets/{ds['id']}/calibrate", params={"mechanism": "gaussian"})
    assert r.status_code == 200, r.text
    m = r.json()["mechanism"]
    assert _dry(client, ds, m) == 200
    assert _dry(client, ds, {**m, "sigma": m["sigma"] * 0.99}) == 409


@pytest.mark.parametrize("filt", ["rdp", "pld"])
def test_nothing_fits_409_carries_spent_as_a_charges_409_does(
    client: TestClient, filt: str
) -> None:
    """h1 finding 3: calibrate's 409 had budget but no ``spent`` (DESIGN: a 409 carries spent,
    budget, requested). Where a charge of the least costly invocation is refused, the 409 is
    that charge's: its spent, budget and requested, the mechanism it names. On a pld dataset the
    least costly invocation is checked on the PLD too (pldcal47): a ledger of one Laplace of
    epsilon 1 leaves the PLD 2e-6 of a budget epsilon of 1, where a Gaussian of sigma 3.6e7
    fits, so the budget is lowered below what was charged: nothing fits either way."""
    ds = new_dataset(client, budget={"epsilon": 1.0, "delta": 1e-6}, **FILTERS[filt])
    laplace = {"mechanism": "laplace", "epsilon": 1.0}
    r = client.post(f"/v1/datasets/{ds['id']}/charges", json={"mechanism": laplace})
    assert r.status_code == 201, r.text
    budget = {"epsilon": 0.9, "delta": 1e-6}
    r = client.patch(f"/v1/datasets/{ds['id']}", json={"budget": budget})
    assert r.status_code == 200, r.text
    spent = client.get(f"/v1/datasets/{ds['id']}/budget").json()["spent"]
    r = client.get(f"/v1/datasets/{ds['id']}/calibrate", params={"mechanism": "gaussian"})
    assert r.status_code == 409, r.text
    problem = r.json()
    assert problem["type"].endswith("/budget-exceeded")
    assert problem["spent"] == spent and problem["budget"] == budget
    m = problem["requested"]["mechanism"]
    charge = client.post(
        f"/v1/datasets/{ds['id']}/charges", params={"dry_run": "true"}, json={"mechanism": m}
    )
    assert charge.status_code == 409, charge.text
    for member in ("spent", "budget", "requested", "would_spend"):
        assert problem[member] == charge.json()[member], member


def test_pld_nothing_fits_by_the_curve_rule_and_not_searched_says_to_dry_run(
    client: TestClient,
) -> None:
    """A pld dataset whose curve rule fits nothing (500 Laplace charges of epsilon 0.01 at
    (1, 1e-6): 1.008 by RDP, 0.936 by the PLD) and whose PLD is not searched for the invocation
    asked (more than ``PLD_MAX_COUNT`` repetitions) says spent and budget, and that its PLD may
    still admit a charge (ask with a dry run): a charge of the least costly one is admitted."""
    ds = new_dataset(client, budget={"epsilon": 1.0, "delta": 1e-6}, **FILTERS["pld"])
    prior = {"mechanism": "laplace", "epsilon": 0.01, "count": 500}
    r = client.post(f"/v1/datasets/{ds['id']}/charges", json={"mechanism": prior})
    assert r.status_code == 201, r.text
    spent = client.get(f"/v1/datasets/{ds['id']}/budget").json()["spent"]
    r = client.get(
        f"/v1/datasets/{ds['id']}/calibrate", params={"mechanism": "laplace", "count": 2000}
    )
    assert r.status_code == 409, r.text
    problem = r.json()
    assert problem["spent"] == spent and problem["budget"] == {"epsilon": 1.0, "delta": 1e-6}
    assert "dry_run=true" in problem["detail"]
    least = {"mechanism": "laplace", "epsilon": 1e-9, "count": 2000}
    assert _dry(client, ds, least) == 200


def test_an_integer_field_given_as_a_float_is_an_integer_or_a_422(client: TestClient) -> None:
    """The calibrate route's query numbers are floats: a kind's integer field (declared
    ``int``) takes 2.0 as 2 and refuses 1.5 naming it."""
    ds = new_dataset(client, budget={"epsilon": 2.0, "delta": 1e-6})
    url = f"/v1/datasets/{ds['id']}/calibrate"
    ok = client.get(url, params={"mechanism": "discrete_laplace", "sensitivity": 2.0})
    assert ok.status_code == 200, ok.text
    assert ok.json()["mechanism"]["sensitivity"] == 2
    assert isinstance(ok.json()["mechanism"]["sensitivity"], int)
    bad = client.get(url, params={"mechanism": "discrete_laplace", "sensitivity": 1.5})
    assert bad.status_code == 422 and "sensitivity must be an integer" in bad.json()["detail"]


def _dp_accounting_epsilon(mechanisms: list[dict], delta: float) -> float:
    """dp_accounting's pessimistic PLD (interval 1e-4) of Laplace (epsilon form, with count)
    and Gaussian mechanisms, composed directly: the independent oracle."""
    from dp_accounting.pld import privacy_loss_distribution as pld

    total = None
    for m in mechanisms:
        if m["mechanism"] == "laplace":
            one = pld.from_laplace_mechanism(1.0 / m["epsilon"])
        else:
            one = pld.from_gaussian_mechanism(m["sigma"], sensitivity=m.get("sensitivity", 1.0))
        one = one.self_compose(m.get("count", 1)) if m.get("count", 1) > 1 else one
        total = one if total is None else total.compose(one)
    assert total is not None
    return float(total.get_epsilon_for_delta(delta))


@pytest.mark.parametrize(("kind", "param"), [("laplace", "epsilon"), ("gaussian", "sigma")])
def test_pld_answers_where_its_curve_rule_admits_nothing(
    sqlite_client: TestClient, kind: str, param: str
) -> None:
    """pldcal47: 500 Laplace charges of epsilon 0.01 on a pld dataset (1, 1e-6) spend 0.936 by
    the PLD (dp_accounting: 0.936) and 1.008 by the RDP rule, so the curve rule fits nothing:
    calibrate answered 409 for every kind ("its PLD may still admit a charge") while a charge's
    dry run took a Laplace of epsilon 0.07. The PLD search now starts from the least costly
    invocation when the PLD admits it: the answer is admitted, keeps the ledger within budget by
    dp_accounting, and 10 % further would not fit by dp_accounting either (not wasteful)."""
    client = sqlite_client
    ds = new_dataset(client, budget={"epsilon": 1.0, "delta": 1e-6}, **FILTERS["pld"])
    prior = {"mechanism": "laplace", "epsilon": 0.01, "count": 500}
    r = client.post(f"/v1/datasets/{ds['id']}/charges", json={"mechanism": prior})
    assert r.status_code == 201, r.text
    conversions = client.get(f"/v1/datasets/{ds['id']}/spend", params={"delta": 1e-6}).json()
    assert conversions["conversions"]["rdp_improved"] > 1.0 > conversions["epsilon"]
    r = client.get(f"/v1/datasets/{ds['id']}/calibrate", params={"mechanism": kind})
    assert r.status_code == 200, r.text
    m = r.json()["mechanism"]
    assert _dry(client, ds, m) == 200
    r = client.post(f"/v1/datasets/{ds['id']}/charges", json={"mechanism": m})
    assert r.status_code == 201, r.text
    assert r.json()["spent"]["epsilon"] <= 1.0
    assert _dp_accounting_epsilon([prior, m], 1e-6) <= 1.0 + 1e-6
    further = {**m, param: m[param] * 1.1 if param == "epsilon" else m[param] / 1.1}
    assert _dp_accounting_epsilon([prior, further], 1e-6) > 1.0


def test_pld_gaussian_of_many_repetitions_is_searched_on_the_pld(sqlite_client: TestClient) -> None:
    """pldcal47: a Gaussian of more than ``PLD_MAX_COUNT`` (1,000) repetitions was not searched
    on the PLD, although its distribution is one Gaussian of sensitivity x sqrt(count), built at
    the cost of one run: after a Laplace of epsilon 0.3 at (1, 1e-6), count 1,000 answered sigma
    179.70 (5.6826 per sqrt(count), dp_accounting's edge 5.6824) and count 1,001 answered 193.81
    (6.1256: 7.8 % more noise). 1 % less noise than the answer does not fit by dp_accounting."""
    client = sqlite_client
    ds = new_dataset(client, budget={"epsilon": 1.0, "delta": 1e-6}, **FILTERS["pld"])
    prior = {"mechanism": "laplace", "epsilon": 0.3}
    r = client.post(f"/v1/datasets/{ds['id']}/charges", json={"mechanism": prior})
    assert r.status_code == 201, r.text
    count = 1001
    r = client.get(
        f"/v1/datasets/{ds['id']}/calibrate", params={"mechanism": "gaussian", "count": count}
    )
    assert r.status_code == 200, r.text
    m = r.json()["mechanism"]
    assert m["count"] == count and _dry(client, ds, m) == 200
    per_run = m["sigma"] / count**0.5  # count Gaussians of sigma: one of sigma / sqrt(count)
    assert _dp_accounting_epsilon([prior, {"mechanism": "gaussian", "sigma": per_run}], 1e-6) <= (
        1.0 + 1e-6
    )
    closer = {"mechanism": "gaussian", "sigma": per_run / 1.01}
    assert _dp_accounting_epsilon([prior, closer], 1e-6) > 1.0
