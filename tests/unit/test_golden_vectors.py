"""Golden vectors from docs/formulas.md section 3 (each computed there independently)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from app.accounting import closed_forms as cf
from app.accounting import conversions as conv
from app.accounting.curve import compose
from app.accounting.filters import FilterKind, spend, spend_delta
from app.accounting.mechanisms import (
    DiscreteLaplace,
    Gaussian,
    Laplace,
    RandomizedResponse,
    Rappor,
    SubsampledGaussian,
)
from app.accounting.subsampled_gaussian import subsampled_gaussian_rdp_at

A = np.array


def _rel(x: float, y: float) -> float:
    return abs(x - y) / abs(y)


# (row, rdp(alpha) function, alpha, expected eps(alpha), mechanism for rho, expected rho)
ROWS_31 = [
    (1, lambda a: a * cf.gaussian_rho(1, 1), 2, 1.0, Gaussian(sigma=1), 0.5),
    (
        2,
        lambda a: a * cf.gaussian_rho(3, 2),
        10.5,
        2.33333333333,
        Gaussian(sigma=3, sensitivity=2),
        0.222222222222,
    ),
    (3, lambda a: a * cf.gaussian_rho(0.5, 1), 1.5, 3.0, Gaussian(sigma=0.5), 2.0),
    (4, lambda a: a * cf.gaussian_rho(2, 1), 64, 8.0, Gaussian(sigma=2), 0.125),
    (5, lambda a: cf.laplace_rdp(a, 1.0), 2, 0.619123629999, Laplace(epsilon=1), 0.367879441171),
    (7, lambda a: cf.laplace_rdp(a, 2.0), 3.5, 1.78440315519, Laplace(epsilon=2), 1.13533528324),
    (
        8,
        lambda a: cf.laplace_rdp(a, 0.5),
        100,
        0.493049145063,
        Laplace(epsilon=0.5),
        0.106530659713,
    ),
    (9, lambda a: cf.laplace_rdp(a, 10.0), 10, 9.92868290154, Laplace(epsilon=10), 9.00004539993),
    (
        10,
        lambda a: cf.laplace_rdp(a, 2.0),
        1.5,
        1.43680915841,
        Laplace.from_scale(1.0, 2.0),
        1.13533528324,
    ),
    (
        11,
        lambda a: cf.discrete_laplace_rdp(a, 1.0, 1),
        2,
        0.735325664056,
        DiscreteLaplace(epsilon=1),
        0.46211715726,
    ),
    (
        12,
        lambda a: cf.discrete_laplace_rdp(a, 1.0, 3),
        2.5,
        0.711009384821,
        DiscreteLaplace(epsilon=1, sensitivity=3),
        0.37943539162,
    ),
    (
        13,
        lambda a: cf.discrete_laplace_rdp(a, 2.0, 5),
        1.5,
        1.46199091181,
        DiscreteLaplace(epsilon=2, sensitivity=5),
        1.1579697424,
    ),
    (
        14,
        lambda a: cf.discrete_laplace_rdp(a, 0.5, 10),
        4,
        0.321320529684,
        DiscreteLaplace(epsilon=0.5, sensitivity=10),
        0.106694557466,
    ),
    (
        16,
        lambda a: cf.rr_rdp(a, 1.0, 2),
        2,
        0.735325664056,
        RandomizedResponse(epsilon=1),
        0.46211715726,
    ),
    (
        17,
        lambda a: cf.rr_rdp(a, 0.5, 2),
        5,
        0.384242690167,
        RandomizedResponse(epsilon=0.5),
        0.122459331202,
    ),
    (
        18,
        lambda a: cf.rr_rdp(a, 3.0, 2),
        1.5,
        2.90777666713,
        RandomizedResponse(epsilon=3),
        2.71544476093,
    ),
    (
        19,
        lambda a: cf.rr_rdp(a, 0.1, 2),
        20,
        0.0671391109046,
        RandomizedResponse(epsilon=0.1),
        0.00499583749579,
    ),
    (
        20,
        lambda a: cf.rr_rdp(a, 1.0, 3),
        2,
        0.618401305624,
        RandomizedResponse(epsilon=1, k=3),
        0.364175327149,
    ),
    (
        21,
        lambda a: cf.rr_rdp(a, 0.5, 4),
        1.5,
        0.103571343621,
        RandomizedResponse(epsilon=0.5, k=4),
        0.0697741629283,
    ),
    (
        22,
        lambda a: cf.rr_rdp(a, 1.0, 6),
        3,
        0.571811485558,
        RandomizedResponse(epsilon=1, k=6),
        0.222624914022,
    ),
    (
        23,
        lambda a: cf.rr_rdp(a, 4.0, 7),
        8,
        3.9851050907,
        RandomizedResponse(epsilon=4, k=7),
        3.53793968983,
    ),
    (
        24,
        lambda a: cf.rr_rdp(a, 2.0, 10),
        3,
        1.61153333947,
        RandomizedResponse(epsilon=2, k=10),
        0.77967346751,
    ),
    (
        25,
        lambda a: cf.rr_rdp(a, 1.0, 10),
        2,
        0.296130448363,
        RandomizedResponse(epsilon=1, k=10),
        0.148132973355,
    ),
    (
        26,
        lambda a: cf.rr_rdp(a, 1.0, 100),
        2.5,
        0.0546360176299,
        RandomizedResponse(epsilon=1, k=100),
        0.0611382122226,
    ),
    (27, lambda a: cf.rappor_rdp(a, 1.0), 2, 0.454672587605, Rappor(epsilon=1), 0.244918662404),
    (28, lambda a: cf.rappor_rdp(a, 0.7), 3.3, 0.350781586463, Rappor(epsilon=0.7), 0.121264610484),
    (29, lambda a: cf.rappor_rdp(a, 4.0), 1.2, 3.32104815245, Rappor(epsilon=4), 3.04637662382),
]


@pytest.mark.parametrize(
    ("row", "rdp", "alpha", "eps_alpha", "mech", "rho"),
    ROWS_31,
    ids=[f"row{r[0]}" for r in ROWS_31],
)
def test_section_3_1_rdp_and_rho(row, rdp, alpha, eps_alpha, mech, rho) -> None:
    # the sheet prints 12 significant digits
    assert _rel(float(rdp(A([float(alpha)]))[0]), eps_alpha) < 5e-12
    # rho: closed forms are exact; numerical suprema (k >= 7) carry a 1e-9 relative margin,
    # and must never be below the sheet's value
    got = mech.curve().rho
    assert _rel(got, rho) < 2e-9
    if row in (25, 26):
        assert got >= rho * (1 - 5e-12)


def test_row_6_and_15_kl_limits() -> None:
    assert _rel(cf.laplace_rho(1.0), 0.367879441171) < 5e-12
    assert _rel(cf.discrete_laplace_kl(3.0, 2), 2.33060951955) < 5e-12


@pytest.mark.parametrize(
    ("q", "sigma", "alpha", "expected"),
    [
        (0.01, 1.0, 2.0, 0.000171813422075),
        (0.01, 1.0, 2.5, 0.000217575332282),
        (0.01, 1.0, 32.0, 11.246275937),
        (0.1, 2.0, 5.5, 0.00864722935096),
        (0.2, 4.0, 1.1, 0.00140395478087),
        (0.01, 10.0, 256.0, 0.000132018536396),
    ],
)
def test_section_3_1_subsampled_gaussian_rows_30_35(
    q: float, sigma: float, alpha: float, expected: float
) -> None:
    # exact signed series (dp_accounting 0.6.0's absolute-value sum gives 0.00640578 for row 34)
    got = subsampled_gaussian_rdp_at(q, sigma, alpha)
    assert _rel(got, expected) < 1e-10


# C1..C8: (mechanisms, delta, rho, BS, CKS, I/DPACC, I/cont, exact or None)
COMPOSITIONS = {
    "C1": (
        [Gaussian(sigma=3, count=10)],
        1e-5,
        0.555556,
        5.613646,
        5.023926,
        5.023950,
        5.023926,
        4.652985,
    ),
    "C2": (
        [Gaussian(sigma=s) for s in (1, 2, 4, 8)],
        1e-6,
        0.664063,
        6.721905,
        6.135431,
        6.135510,
        6.135431,
        5.747468,
    ),
    "C3": (
        [Gaussian(sigma=100, count=2)],
        1e-5,
        1.0e-4,
        0.067961,
        0.045047,
        0.045089,
        0.045047,
        0.039991,
    ),
    "C4": (
        [Laplace(epsilon=0.1, count=100)],
        1e-5,
        0.483742,
        5.203608,
        4.639503,
        4.532686,
        4.532683,
        None,
    ),
    "C5": (
        [RandomizedResponse(epsilon=0.5, count=50)],
        1e-6,
        6.122967,
        24.517739,
        23.386663,
        21.068866,
        21.068356,
        None,
    ),
    "C6": (
        [RandomizedResponse(epsilon=1, k=4, count=20)],
        1e-5,
        6.009784,
        22.645912,
        21.462428,
        18.303665,
        18.303642,
        None,
    ),
    "C7": (
        [Rappor(epsilon=2, count=10)],
        1e-5,
        9.242343,
        29.873039,
        28.550665,
        19.994919,
        19.994726,
        None,
    ),
    "C8": (
        [SubsampledGaussian(sigma=1, sample_rate=0.01, steps=1000)],
        1e-5,
        None,
        None,
        None,
        2.101365,
        2.101322,
        None,
    ),
}


@pytest.mark.parametrize("cid", sorted(COMPOSITIONS))
def test_section_3_2_compositions(cid: str) -> None:
    mechs, delta, rho, bs, cks, i_dpacc, i_cont, exact = COMPOSITIONS[cid]
    curve = compose([m.curve() for m in mechs])
    s = spend(FilterKind.RDP, curve, delta)
    c = s.candidates
    tol = 1e-6  # the sheet prints 6 decimals
    if rho is not None:
        assert curve.rho == pytest.approx(rho, abs=1e-6)
        assert c["zcdp_bun_steinke"] == pytest.approx(bs, abs=tol)
        assert c["zcdp_cks"] == pytest.approx(cks, abs=tol)
    # our grid contains dp_accounting's, so the improved conversion is at most I/DPACC and,
    # being a grid minimum, at least the continuum value
    assert c["rdp_improved"] <= i_dpacc + tol
    assert c["rdp_improved"] >= i_cont - tol
    if exact is not None:
        assert c["gaussian_exact"] == pytest.approx(exact, abs=tol)
        assert s.method == "gaussian_exact"
    assert s.epsilon == min(c.values())


@pytest.mark.parametrize(
    ("mechs", "eps", "exact", "cks", "bs", "improved"),
    [
        ([Gaussian(sigma=3, count=10)], 2.0, 2.864467e-2, 7.209027e-2, 3.910621e-1, 7.209924e-2),
        ([Gaussian(sigma=3, count=10)], 4.0, 1.196275e-4, 4.762676e-4, 4.801202e-3, 4.766314e-4),
        (
            [RandomizedResponse(epsilon=0.5, count=50)],
            15.0,
            1.520238e-3,
            1.203524e-2,
            4.005647e-2,
            6.607964e-3,
        ),
        (
            [RandomizedResponse(epsilon=0.5, count=50)],
            20.0,
            1.215384e-6,
            8.670774e-5,
            3.848356e-4,
            7.877544e-6,
        ),
    ],
)
def test_section_3_3_delta_at_epsilon(mechs, eps, exact, cks, bs, improved) -> None:
    curve = compose([m.curve() for m in mechs])
    d = spend_delta(FilterKind.RDP, curve, eps)
    c = d.candidates
    assert _rel(c["zcdp_cks"], cks) < 1e-6
    assert _rel(c["zcdp_bun_steinke"], bs) < 1e-6
    assert c["rdp_improved"] <= improved * (1 + 1e-6)
    if curve.gaussian_only:
        assert _rel(c["gaussian_exact"], exact) < 1e-6
    assert d.delta >= exact * (1 - 1e-6)  # never below the exact delta


@pytest.mark.parametrize(
    ("rho", "delta", "bs", "cks"),
    [
        (0.01, 1e-5, 0.6886140424, 0.5457255483),
        (0.1, 1e-6, 2.4507880005, 2.1419389284),
        (0.5, 1e-5, 5.2985259122, 4.7283869849),
        (1.0, 1e-9, 10.1045627763, 9.5214636718),
        (5.0, 1e-5, 20.1742712939, 19.0472595523),
        (0.0005, 1e-5, 0.1522427129, 0.1081122360),
    ],
)
def test_section_3_4_zcdp_conversions(rho: float, delta: float, bs: float, cks: float) -> None:
    assert conv.zcdp_epsilon_bun_steinke(rho, delta) == pytest.approx(bs, abs=2e-10)
    got = conv.zcdp_epsilon_cks(rho, delta)
    assert got == pytest.approx(cks, abs=2e-8)
    # and the CKS delta at that epsilon is the target delta
    assert conv.zcdp_delta_cks(rho, got) == pytest.approx(delta, rel=1e-6)
    assert conv.zcdp_delta_cks(rho, got) <= delta * (1 + 1e-9)


@pytest.mark.parametrize(
    ("mu", "eps", "delta"),
    [
        (0.5, 0.5, 5.244032328766973e-2),
        (1.0, 1.0, 1.269367375066439e-1),
        (1.0541, 3.0, 2.733034354947393e-3),
        (3.0, 5.0, 3.193918799058880e-1),
        (0.1, 0.05, 2.026745713743531e-2),
    ],
)
def test_section_3_5_exact_gaussian(mu: float, eps: float, delta: float) -> None:
    assert _rel(conv.gaussian_delta(mu, eps), delta) < 1e-13
    assert conv.gaussian_delta(mu, eps) >= delta * (1 - 2e-15)
    back = conv.gaussian_epsilon(mu, delta)
    assert back == pytest.approx(eps, rel=1e-10)


def test_whitened_gaussian_blocks() -> None:
    # docs/formulas.md §2.3: sigma = (1, 2), Delta = (1, 1.5), eps = 0.7 -> delta = 0.2882726135117236
    curve = Gaussian(sigma=1, sensitivity=1).curve() + Gaussian(sigma=2, sensitivity=1.5).curve()
    d = spend_delta(FilterKind.GDP, curve, 0.7)
    assert _rel(d.delta, 0.2882726135117236) < 1e-12
    assert math.isclose(curve.rho, 0.5 + 1.5**2 / 8, rel_tol=1e-15)
