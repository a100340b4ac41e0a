"""Curves and conversions against independent oracles.

* dp_accounting 0.6.0 (Google): Gaussian, Laplace, k-RR (REPLACE_ONE), Poisson-subsampled
  Gaussian at integer orders, and its RdpAccountant's epsilon for whole ledgers;
* direct Renyi divergences in 50-digit mpmath arithmetic: exact sums over the output space for
  RR, k-RR, RAPPOR (all 2^d outputs) and discrete Laplace, quadrature for the subsampled
  Gaussian at fractional orders (where dp_accounting 0.6.0 over-states: ours must be <= it);
* opendp's zCDP -> approximate-DP conversion;
* the analytic Gaussian by numerical integration of (p - e^eps q)_+.
"""

from __future__ import annotations

import itertools
import math

import mpmath as mp
import numpy as np
import pytest
from dp_accounting import dp_event
from dp_accounting.rdp import rdp_privacy_accountant as rdpa
from scipy import integrate, stats

from app.accounting import conversions as conv
from app.accounting.curve import compose
from app.accounting.filters import FilterKind, spend
from app.accounting.mechanisms import (
    DiscreteLaplace,
    Gaussian,
    Laplace,
    RandomizedResponse,
    Rappor,
    SubsampledGaussian,
)
from app.accounting.orders import DPACC_DEFAULT_ORDERS, ORDERS

mp.mp.dps = 50
SAMPLE = [
    i for i, a in enumerate(ORDERS) if a in (1.1, 1.5, 2.0, 2.5, 3.7, 8.0, 10.9, 32.0, 63.0, 256.0)
]
DPACC = np.array(DPACC_DEFAULT_ORDERS)
IDX_DPACC = np.array([int(np.flatnonzero(ORDERS == a)[0]) for a in DPACC])


def _dpacc_rdp(
    event: dp_event.DpEvent, relation=rdpa.NeighborRel.ADD_OR_REMOVE_ONE, orders=ORDERS
) -> np.ndarray:
    acc = rdpa.RdpAccountant(orders=list(orders), neighboring_relation=relation)
    acc.compose(event)
    return np.array(acc._rdp)  # noqa: SLF001 - the accountant's composed RDP vector


def _renyi_discrete(p: list, q: list, alpha: float) -> float:
    a = mp.mpf(alpha)
    s = mp.fsum(pi**a * qi ** (1 - a) for pi, qi in zip(p, q, strict=True) if pi > 0)
    return float(mp.log(s) / (a - 1))


@pytest.mark.parametrize(("sigma", "sens"), [(1.0, 1.0), (3.0, 2.0), (0.7, 1.0), (50.0, 1.0)])
def test_gaussian_vs_dp_accounting(sigma: float, sens: float) -> None:
    ours = Gaussian(sigma=sigma, sensitivity=sens).curve().rdp
    theirs = _dpacc_rdp(dp_event.GaussianDpEvent(noise_multiplier=sigma / sens))
    np.testing.assert_allclose(ours, theirs, rtol=1e-12)


@pytest.mark.parametrize("eps", [0.01, 0.1, 0.5, 1.0, 3.0, 10.0])
def test_laplace_vs_dp_accounting_and_quadrature(eps: float) -> None:
    ours = Laplace(epsilon=eps).curve().rdp
    theirs = _dpacc_rdp(dp_event.LaplaceDpEvent(noise_multiplier=1.0 / eps))
    np.testing.assert_allclose(ours, theirs, rtol=1e-9)
    # direct divergence between Lap(0, 1/eps) and Lap(1, 1/eps) by quadrature
    b = mp.mpf(1) / eps
    for j in SAMPLE[:5]:
        a = mp.mpf(float(ORDERS[j]))

        def integrand(x: mp.mpf, a: mp.mpf = a) -> mp.mpf:
            p = mp.exp(-abs(x) / b) / (2 * b)
            q = mp.exp(-abs(x - 1) / b) / (2 * b)
            return p**a * q ** (1 - a)

        val = mp.quad(integrand, [-mp.inf, 0, 1, mp.inf])
        assert float(mp.log(val) / (a - 1)) == pytest.approx(ours[j], rel=1e-9)


@pytest.mark.parametrize(
    ("eps", "k"), [(0.5, 2), (1.0, 3), (1.0, 10), (2.0, 100), (4.0, 7), (0.05, 2)]
)
def test_krr_vs_dp_accounting_and_exact_sums(eps: float, k: int) -> None:
    ours = RandomizedResponse(epsilon=eps, k=k).curve().rdp
    noise = k / (math.exp(eps) + k - 1)
    theirs = _dpacc_rdp(
        dp_event.RandomizedResponseDpEvent(noise_parameter=noise, num_buckets=k),
        rdpa.NeighborRel.REPLACE_ONE,
    )
    np.testing.assert_allclose(ours, theirs, rtol=1e-9)
    e = mp.e ** mp.mpf(eps)
    den = e + k - 1
    p = [e / den] + [1 / den] * (k - 1)  # input v = 0
    q = [1 / den, e / den] + [1 / den] * (k - 2)  # input v' = 1
    for j in SAMPLE:
        assert _renyi_discrete(p, q, float(ORDERS[j])) == pytest.approx(ours[j], rel=1e-9)


@pytest.mark.parametrize(("eps", "d"), [(1.0, 3), (0.7, 4), (4.0, 5)])
def test_rappor_by_enumerating_outputs(eps: float, d: int) -> None:
    ours = Rappor(epsilon=eps).curve().rdp
    keep = mp.e ** (mp.mpf(eps) / 2) / (1 + mp.e ** (mp.mpf(eps) / 2))

    def dist(v: int) -> list:
        out = []
        for bits in itertools.product((0, 1), repeat=d):
            pr = mp.mpf(1)
            for i, b in enumerate(bits):
                pr *= keep if b == (1 if i == v else 0) else 1 - keep
            out.append(pr)
        return out

    p, q = dist(0), dist(1)
    for j in SAMPLE[:7]:
        assert _renyi_discrete(p, q, float(ORDERS[j])) == pytest.approx(ours[j], rel=1e-9)


@pytest.mark.parametrize(("eps", "sens"), [(1.0, 1), (1.0, 3), (2.0, 5), (0.5, 10)])
def test_discrete_laplace_by_exact_sums(eps: float, sens: int) -> None:
    ours = DiscreteLaplace(epsilon=eps, sensitivity=sens).curve().rdp
    t = mp.mpf(eps) / sens
    c = mp.tanh(t / 2)
    zs = range(-400 * sens, 400 * sens)
    p = [c * mp.e ** (-t * abs(z)) for z in zs]
    q = [c * mp.e ** (-t * abs(z - sens)) for z in zs]
    for j in SAMPLE[:6]:
        got = ours[j]
        want = _renyi_discrete(p, q, float(ORDERS[j]))
        assert got >= want  # a sound margin is added, never subtracted
        assert got == pytest.approx(want, rel=1e-9, abs=1e-14)


@pytest.mark.parametrize(("q", "sigma"), [(0.01, 1.0), (0.1, 2.0), (0.2, 4.0), (0.001, 0.8)])
def test_subsampled_gaussian_vs_dp_accounting(q: float, sigma: float) -> None:
    # dp_accounting is slow at orders up to 1e5 (a Python loop per term): compare up to 1024
    low = ORDERS <= 1024
    ours = SubsampledGaussian(sigma=sigma, sample_rate=q, steps=1).curve().rdp[low]
    orders = ORDERS[low]
    theirs = _dpacc_rdp(
        dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(sigma)), orders=orders
    )
    integer = np.equal(np.floor(orders), orders)
    np.testing.assert_allclose(ours[integer], theirs[integer], rtol=1e-9)
    # at fractional orders dp_accounting 0.6.0 sums absolute values: an upper bound on ours
    assert (ours[~integer] <= theirs[~integer] * (1 + 1e-12)).all()


@pytest.mark.parametrize(
    ("q", "sigma", "alpha"), [(0.01, 1.0, 2.5), (0.2, 4.0, 1.1), (0.1, 2.0, 5.5), (0.05, 1.5, 3.3)]
)
def test_subsampled_gaussian_fractional_vs_quadrature(q: float, sigma: float, alpha: float) -> None:
    from app.accounting.subsampled_gaussian import subsampled_gaussian_rdp_at

    qq, s, a = mp.mpf(q), mp.mpf(sigma), mp.mpf(alpha)

    def integrand(z: mp.mpf) -> mp.mpf:
        mu0 = mp.npdf(z, 0, s)
        ratio = 1 - qq + qq * mp.e ** ((2 * z - 1) / (2 * s**2))
        return mu0 * ratio**a

    z0 = float(s**2 * mp.log(1 / qq - 1) + mp.mpf(1) / 2)
    val = mp.quad(integrand, [-mp.inf, -10 * s, 0, z0, 10 * s + alpha, mp.inf])
    want = float(mp.log(val) / (a - 1))
    got = subsampled_gaussian_rdp_at(q, sigma, alpha)
    assert got >= want * (1 - 1e-12)
    assert got == pytest.approx(want, rel=1e-9)


LEDGERS = {
    "gaussian": (
        [Gaussian(sigma=4.0, count=20)],
        [dp_event.SelfComposedDpEvent(dp_event.GaussianDpEvent(4.0), 20)],
    ),
    "laplace": (
        [Laplace(epsilon=0.1, count=100)],
        [dp_event.SelfComposedDpEvent(dp_event.LaplaceDpEvent(10.0), 100)],
    ),
    "dpsgd": (
        [SubsampledGaussian(sigma=1.1, sample_rate=0.01, steps=500)],
        [
            dp_event.SelfComposedDpEvent(
                dp_event.PoissonSampledDpEvent(0.01, dp_event.GaussianDpEvent(1.1)), 500
            )
        ],
    ),
    "mixed": (
        [Gaussian(sigma=5.0, count=3), Laplace(epsilon=0.3, count=4)],
        [
            dp_event.SelfComposedDpEvent(dp_event.GaussianDpEvent(5.0), 3),
            dp_event.SelfComposedDpEvent(dp_event.LaplaceDpEvent(1 / 0.3), 4),
        ],
    ),
}


@pytest.mark.parametrize("name", sorted(LEDGERS))
@pytest.mark.parametrize("delta", [1e-5, 1e-9])
def test_spend_never_above_dp_accounting(name: str, delta: float) -> None:
    ours_m, events = LEDGERS[name]
    curve = compose([m.curve() for m in ours_m])
    acc = rdpa.RdpAccountant()  # dp_accounting's default orders, add/remove
    for e in events:
        acc.compose(e)
    theirs = acc.get_epsilon(delta)
    s = spend(FilterKind.RDP, curve, delta)
    assert s.epsilon <= theirs * (1 + 1e-9)
    # restricted to dp_accounting's orders, the improved conversion is the same number
    # (the subsampled Gaussian: dp_accounting over-states fractional orders, so <=)
    restricted, _ = conv.rdp_epsilon_improved(curve.rdp[IDX_DPACC], delta, DPACC)
    if name == "dpsgd":
        assert restricted <= theirs * (1 + 1e-9)
    else:
        assert restricted == pytest.approx(theirs, rel=1e-9)


@pytest.mark.parametrize(("rho", "delta"), [(0.01, 1e-5), (0.1, 1e-6), (0.5, 1e-5), (2.0, 1e-9)])
def test_zcdp_conversion_vs_opendp(rho: float, delta: float) -> None:
    import opendp.prelude as dp

    dp.enable_features("contrib")
    space = dp.atom_domain(T=float, nan=False), dp.absolute_distance(T=float)
    # a Gaussian measurement with rho-zCDP at d_in = 1: rho = 1 / (2 scale^2)
    meas = dp.m.make_gaussian(*space, scale=math.sqrt(1 / (2 * rho)))
    approx = dp.c.make_zCDP_to_approxDP(meas)
    curve = approx.map(1.0)
    theirs = curve.epsilon(delta)
    ours = conv.zcdp_epsilon_cks(rho, delta)
    assert ours <= theirs * (1 + 1e-9)
    assert ours == pytest.approx(theirs, rel=1e-6)


@pytest.mark.parametrize(("mu", "eps"), [(0.5, 0.3), (1.0, 1.0), (2.0, 2.5), (0.2, 0.01)])
def test_exact_gaussian_vs_quadrature(mu: float, eps: float) -> None:
    p = stats.norm(loc=0.0, scale=1.0)
    q = stats.norm(loc=mu, scale=1.0)

    def f(x: float) -> float:
        return max(q.pdf(x) - math.exp(eps) * p.pdf(x), 0.0)

    # q/p is increasing, so the positive part starts at x* = eps / mu + mu / 2
    x_star = eps / mu + mu / 2
    want, err = integrate.quad(f, x_star, np.inf, epsabs=1e-14, epsrel=1e-12)
    assert conv.gaussian_delta(mu, eps) == pytest.approx(want, rel=1e-9, abs=1e-14)


def _discrete_laplace_rdp_mp(eps: float, sens: int, alpha: float) -> mp.mpf:
    """The closed form of docs/formulas.md §1.3 at 60 digits (no float cancellation)."""
    with mp.workdps(60):
        e, t, a = mp.mpf(eps), mp.mpf(eps) / sens, mp.mpf(alpha)
        s = mp.e ** (-(2 * a - 1) * t)
        total = (mp.e ** ((a - 1) * e) + mp.e ** (-a * e)) / (1 + mp.e ** (-t))
        total += mp.tanh(t / 2) * mp.e ** ((a - 1) * e) * s * (1 - s ** (sens - 1)) / (1 - s)
        return mp.log(total) / (a - 1)


@pytest.mark.parametrize("sens", [2, 4, 100])
@pytest.mark.parametrize("eps", [1e-9, 1e-7, 1e-5, 1e-3])
def test_discrete_laplace_with_a_tiny_epsilon_is_tight(eps: float, sens: int) -> None:
    """Where eps is tiny the divergence is below the closed form's float rounding: the rounding
    margin (8e-16 / (alpha - 1)) and the noise of the numerical scan for rho made the curve up
    to 10^5 times, and rho up to 10^6 times, the bound eps^2 / 2 that any eps-DP mechanism
    meets. Both are now within a factor 1 + eps of the exact values (and never below them)."""
    curve = DiscreteLaplace(epsilon=eps, sensitivity=sens).curve()
    with mp.workdps(60):
        e, t = mp.mpf(eps), mp.mpf(eps) / sens
        kl = e - t * (1 - mp.e ** (-e)) / mp.sinh(t)
    assert kl <= curve.rho <= kl * (1 + eps + 1e-12)
    for j in SAMPLE:
        alpha = float(ORDERS[j])
        want = _discrete_laplace_rdp_mp(eps, sens, alpha)
        assert want <= curve.rdp[j] <= want * (1 + alpha * eps + 1e-12), alpha
