"""Mechanism PLDs (app/accounting/pld_mechanisms.py) against dp_accounting and exact values.

* Tightness: on every fixed-parameter ledger of ``pld_ledgers.LEDGERS`` (25 ledgers, every
  kind), our epsilon is <= 1.01 x dp_accounting's pessimistic PLD at interval 1e-4.
* Soundness: never below dp_accounting's optimistic PLD at 1e-4 (margin 0), and never below
  exact values where they exist (k-fold k-RR by multinomial sums, approx-DP by the binomial
  composition of its dominating pair, a concrete exponential mechanism by enumeration).
* The bounded-range worst case of the exponential mechanism against a direct maximisation.
"""

from __future__ import annotations

import itertools
import math

import mpmath as mp
import numpy as np
import pytest

from app.accounting import pld_mechanisms as pm
from app.accounting.kinds import KINDS, KindSpec
from app.accounting.pld import Pld, interval_for_budget
from app.accounting.rounding import up
from tests import toy_kind as toy
from tests.unit import pld_ledgers as L

mp.mp.dps = 50
DELTA = 1e-6


@pytest.mark.parametrize("name", sorted(L.LEDGERS))
def test_ledger_within_one_percent_of_dp_accounting_and_never_below_optimistic(name: str) -> None:
    _, entries = L.LEDGERS[name]
    ours = pm.compose_all(entries).epsilon(DELTA)
    pessimistic, optimistic = L.epsilons(entries, DELTA)
    assert ours <= 1.01 * pessimistic, (ours, pessimistic)
    assert ours >= optimistic, (ours, optimistic)
    if any(e["mechanism"] == "exponential" for e in entries):
        e = entries[0]
        assert ours >= L.exponential_lower_bound(e["epsilon"], e["count"], DELTA)


def test_every_kind_is_covered() -> None:
    """Not derived: each ledger is checked against the kind's own dp_accounting reference, an
    oracle that only its author can write."""
    kinds = {e["mechanism"] for _, entries in L.LEDGERS.values() for e in entries}
    assert kinds >= pm.PLD_KINDS, (
        f"kind(s) {sorted(pm.PLD_KINDS - kinds)} have a PLD builder but no ledger: add one to "
        "LEDGERS in tests/unit/pld_ledgers.py and its dp_accounting reference to _unit there"
    )
    assert kinds == pm.PLD_KINDS
    assert len(L.LEDGERS) >= 20


# --- exact values ----------------------------------------------------------------------------


def _exact_krr_delta(eps_rr: float, k: int, n: int, eps: float) -> mp.mpf:
    """n-fold k-RR: the loss is (a - b) eps_rr with (a, b, rest) multinomial."""
    e = mp.e ** mp.mpf(eps_rr)
    p_hi, p_lo = e / (e + k - 1), 1 / (e + k - 1)
    p_zero = 1 - p_hi - p_lo
    total = mp.mpf(0)
    for a in range(n + 1):
        for b in range(n - a + 1):
            loss = (a - b) * mp.mpf(eps_rr)
            if loss > eps:
                w = mp.factorial(n) / (mp.factorial(a) * mp.factorial(b) * mp.factorial(n - a - b))
                total += w * p_hi**a * p_lo**b * p_zero ** (n - a - b) * (1 - mp.e ** (eps - loss))
    return total


@pytest.mark.parametrize(("eps_rr", "k", "n"), [(1.0, 4, 20), (0.3, 3, 40), (2.0, 10, 6)])
def test_krr_never_below_the_exact_multinomial(eps_rr: float, k: int, n: int) -> None:
    ours = pm.randomized_response(eps_rr, k, n)
    for eps in (0.0, 0.5, 2.0, 0.7 * n * eps_rr):
        exact = _exact_krr_delta(eps_rr, k, n, eps)
        assert exact <= ours.delta(eps) <= exact * (1 + 1e-3) + 5e-11


@pytest.mark.parametrize(("eps0", "delta0", "n"), [(1.0, 1e-8, 5), (0.1, 1e-9, 30)])
def test_approx_dp_never_below_its_exact_composition(eps0: float, delta0: float, n: int) -> None:
    # n-fold composition of the (eps0, delta0) dominating pair [Kairouz, Oh, Viswanath 2015]:
    # loss +inf unless no entry hit its delta, then a binomial of +-eps0
    ours = pm.approx_dp(eps0, delta0, n)
    p = mp.e ** mp.mpf(eps0) / (1 + mp.e ** mp.mpf(eps0))
    for eps in (0.0, 0.3, 1.0, 2.5):
        body = mp.fsum(
            mp.binomial(n, j) * p**j * (1 - p) ** (n - j) * (1 - mp.e ** (eps - (2 * j - n) * eps0))
            for j in range(n + 1)
            if (2 * j - n) * eps0 > eps
        )
        exact = 1 - (1 - mp.mpf(delta0)) ** n + (1 - mp.mpf(delta0)) ** n * body
        assert exact <= ours.delta(eps) <= exact * (1 + 1e-3) + 5e-11


def test_exponential_mechanism_instance_never_exceeds_our_bound() -> None:
    # exponential mechanism over 4 outputs, scores of sensitivity 1 on neighbours x, x'
    eps = 0.8
    u = np.array([0.0, 1.0, 2.5, 3.0])
    u_neighbour = u + np.array([1.0, -1.0, 0.5, 0.0])
    p = np.exp(eps * u / 2) / np.exp(eps * u / 2).sum()
    q = np.exp(eps * u_neighbour / 2) / np.exp(eps * u_neighbour / 2).sum()
    n = 3
    ours = pm.exponential(eps, n)
    for e in (0.0, 0.2, 0.6, 1.2):
        for a, b in ((p, q), (q, p)):
            exact = mp.fsum(
                max(mp.mpf(0), mp.fprod(a[list(o)]) - mp.e**e * mp.fprod(b[list(o)]))
                for o in itertools.product(range(4), repeat=n)
            )
            assert exact <= ours.delta(e)
    assert ours.epsilon(DELTA) <= pm.pure_dp(eps, n).epsilon(DELTA)


@pytest.mark.parametrize("eta", [0.05, 0.5, 1.0, 4.0])
def test_bounded_range_worst_case_matches_a_direct_maximisation(eta: float) -> None:
    def hockey(t: mp.mpf, e: mp.mpf) -> mp.mpf:
        a = (1 - mp.e**t) / (1 - mp.e ** (-eta))
        return a * max(0, 1 - mp.e ** (e - t - eta)) + (1 - a) * max(0, 1 - mp.e ** (e - t))

    for e in np.linspace(-1.2 * eta, 1.2 * eta, 13):
        e_mp = mp.mpf(float(e))
        ts = [-eta * j / 400 for j in range(401)]
        direct = max(hockey(mp.mpf(t), e_mp) for t in ts)

        def slope(t: mp.mpf, e_mp: mp.mpf = e_mp) -> mp.mpf:
            return mp.diff(lambda s: hockey(s, e_mp), t)

        refined = mp.findroot(slope, (e_mp - eta) / 2)
        if -eta <= refined <= 0:
            direct = max(direct, hockey(refined, e_mp))
        closed = pm.bounded_range_delta(eta, np.array([float(e)]))[0]
        assert closed >= float(direct) * (1 - 1e-12) - 1e-15
        assert closed <= float(direct) * (1 + 1e-9) + 1e-15


# --- dispatch --------------------------------------------------------------------------------


@pytest.mark.parametrize(("kind", "accepted"), [("zcdp", "'rdp' or 'zcdp'"), ("rdp", "'rdp'")])
def test_kinds_without_a_pld_are_refused_with_the_accountings_that_take_them(
    kind: str, accepted: str
) -> None:
    with pytest.raises(pm.NoPldError) as info:
        pm.for_mechanism({"mechanism": kind, "rho": 0.1})
    assert isinstance(info.value, ValueError)
    assert accepted in str(info.value)
    assert info.value.kind == kind


def test_the_pld_tables_are_what_each_kind_declares() -> None:
    """``_BUILDERS``, ``PLD_KINDS`` and ``NO_PLD_KINDS`` are derived from ``KindSpec.pld``."""
    for name, s in KINDS.items():
        if s.pld is None:
            assert name not in pm.PLD_KINDS and s.no_pld
            assert pm.NO_PLD_KINDS[name] == s.accountings and "pld" not in s.accountings
        else:
            assert pm._BUILDERS[name] is getattr(pm, s.pld) and "pld" in s.accountings
            assert name in pm.PLD_KINDS and name not in pm.NO_PLD_KINDS
    assert KINDS["gaussian"].accountings == ("rdp", "zcdp", "pld")
    assert KINDS["zcdp"].accountings == ("rdp", "zcdp")
    assert KINDS["rdp"].accountings == ("rdp",)  # no finite rho: zcdp never admits it


def test_a_kind_without_a_pld_is_refused_naming_rdp_and_zcdp(toy_kind: KindSpec) -> None:
    """A new kind that declares no PLD builder: refused on pld with the accountings that take it
    (rdp, and zcdp as its rho is finite), not as an unknown mechanism."""
    assert toy_kind.accountings == ("rdp", "zcdp")
    wire = {"mechanism": toy_kind.name, "scale": 2.0}
    for refuse in (
        lambda: pm.for_mechanism(wire),
        lambda: pm.check_kinds([wire]),
        lambda: pm.compose_all([{"mechanism": "gaussian", "sigma": 2.0}, wire]),
    ):
        with pytest.raises(pm.NoPldError) as info:
            refuse()
        assert info.value.kind == toy_kind.name and info.value.accepted == ("rdp", "zcdp")
        assert toy_kind.no_pld in str(info.value) and "'rdp' or 'zcdp'" in str(info.value)


def test_a_kind_names_a_pld_builder_or_says_why_not() -> None:
    base = {"mechanism": toy.ToyGeometric, "description": "d", "neighbours": "n"}
    with pytest.raises(TypeError, match="say why"):
        KindSpec(**base, pld=None)
    with pytest.raises(TypeError, match="no_pld reason"):
        KindSpec(**base, pld="pure_dp", no_pld="none")
    misnamed = KindSpec(**base, pld="geometric")
    with pytest.raises(TypeError, match="'geometric'"):
        pm._builder_named(misnamed)
    with pytest.raises(TypeError, match="'_check'"):
        pm._builder_named(KindSpec(**base, pld="_check"))
    # named, a test kind's builder is found without the package's discovery
    named = KindSpec(**base, pld="pure_dp")
    assert pm._builder_named(named) is pm.pure_dp


def test_laplace_scale_form_and_bad_input() -> None:
    a = pm.for_mechanism({"mechanism": "laplace", "scale": 4.0, "sensitivity": 2.0, "count": 3})
    b = pm.laplace(0.5, 3)
    assert a.epsilon(DELTA) >= b.epsilon(DELTA) * (1 - 1e-12)
    with pytest.raises(ValueError):
        pm.for_mechanism({"mechanism": "laplace", "epsilon": 0.5, "bogus": 1})
    with pytest.raises(ValueError):
        pm.for_mechanism({"mechanism": "nope"})
    with pytest.raises(ValueError):
        pm.gaussian(-1.0)
    with pytest.raises(ValueError):
        pm.randomized_response(1.0, k=1)
    with pytest.raises(ValueError):
        pm.subsampled_gaussian(1.0, 1.0, 0.0)


def test_degenerate_parameters() -> None:
    assert pm.approx_dp(1.0, 1.0).epsilon(0.5) == math.inf
    assert pm.approx_dp(0.0, 0.0, 3).epsilon(1e-9) == 0.0
    # the pure-DP sum, 2.0, is all there is; delta = 0 itself is not asked (the +inf mass holds
    # the FFT error bound, ~1e-23 here)
    assert pm.pure_dp(0.5, 4).epsilon(1e-15) <= 2.0 * (1 + 1e-12)


def test_sample_rate_one_is_a_plain_gaussian() -> None:
    assert pm.subsampled_gaussian(2.0, 1.0, 1.0, 5) == pm.gaussian(2.0, 1.0, 5)


def test_empty_ledger_composes_to_zero() -> None:
    p = pm.compose_all([])
    assert p == Pld.identity()
    assert p.epsilon(1e-9) == 0.0


def test_gaussians_past_every_budget_are_refused_not_crashed() -> None:
    """sensitivity / sigma above 1e4: ValueError (422) naming why; from about 1.4e4 on,
    dp_accounting's construction overflowed (OverflowError: a 500 on a pld dataset's charge
    and the stateless compose). At 1e4 the construction works and the loss is past every
    budget (largest budget epsilon 1e6)."""
    iv = interval_for_budget(1.0, 1e-12)
    for data in (
        {"mechanism": "gaussian", "sigma": 0.3577088496937109, "sensitivity": 25536.79, "count": 3},
        {"mechanism": "gaussian", "sigma": 4.238695442538071e-05},
        {"mechanism": "subsampled_gaussian", "sigma": 1e-3, "sample_rate": 1.0, "steps": 10**9},
    ):
        with pytest.raises(ValueError, match="no useful PLD"):
            pm.for_mechanism(data, interval=iv)
    edge = pm.for_mechanism({"mechanism": "gaussian", "sigma": 1.0001e-4}, interval=iv)
    assert edge.epsilon(1 - 1e-9) > 1e6


def test_arithmetic_errors_of_a_construction_are_value_errors(monkeypatch) -> None:
    """Whatever float overflow a construction meets is a ValueError (422), never a 500."""

    def overflowing(*_a, **_k):
        raise OverflowError("math range error")

    monkeypatch.setitem(pm._BUILDERS, "rappor", overflowing)
    with pytest.raises(ValueError, match="beyond what a privacy loss distribution"):
        pm.for_mechanism({"mechanism": "rappor", "epsilon": 1.0})


def test_discrete_laplace_of_a_huge_sensitivity_is_bounded_and_sound() -> None:
    """Above 10^6 the construction (linear in the sensitivity: minutes at 10^9, under the
    dataset's lock) is replaced by the worst (t Delta)-DP pair, counted rather than timed: the
    PLD is ``pure_dp``'s, never below the exact discrete Laplace's at 10^6 (the same epsilon)."""
    iv = interval_for_budget(1.0, 1e-6)
    huge = pm.discrete_laplace(0.5, 10**9, 100, interval=iv)
    t = up(0.5 / 10**9)
    assert huge == pm.pure_dp(up(t * 10**9), 100, interval=iv)
    exact = pm.discrete_laplace(0.5, 10**6, 100, interval=iv)
    for delta in (1e-9, 1e-6, 1e-3):
        assert huge.epsilon(delta) >= exact.epsilon(delta)


def test_compose_all_groups_identical_mechanisms_and_bounds_the_distinct_ones() -> None:
    """Identical mechanisms compose once with their counts added (1,000 equal entries: one
    self-composition, not 1,000 convolutions: 5 s for Gaussians before); more than MAX_DISTINCT
    distinct ones is a ValueError (each construction costs up to about a second: a 10,000-entry
    compose was unbounded in practice). Counted, not timed."""
    laplace = {"mechanism": "laplace", "epsilon": 0.01, "count": 1}
    grouped = pm.compose_all([laplace] * 1000)
    assert grouped == pm.compose_all([{**laplace, "count": 1000}])
    distinct = [{"mechanism": "laplace", "epsilon": 0.01 * (1 + i)} for i in range(pm.MAX_DISTINCT)]
    pm.compose_all(distinct + distinct)  # repeats do not count
    with pytest.raises(ValueError, match=f"at most {pm.MAX_DISTINCT} distinct"):
        pm.compose_all([*distinct, {"mechanism": "laplace", "epsilon": 0.5}])
