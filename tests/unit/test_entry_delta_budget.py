"""Adaptive filters that set part of the delta budget aside for entries with their own delta
(``Filter.entry_delta``, docs/formulas.md §2.6): the rule is the one made for
(eps_B, delta_B - D), entries' deltas are admitted while they add up to at most D, every spend
converts at the target delta less D; against the plain filter built for the smaller budget
(computed independently), and soundness against dp_accounting's privacy loss distributions."""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction

import pytest
from dp_accounting.pld import common
from dp_accounting.pld import privacy_loss_distribution as pld
from hypothesis import given, settings
from hypothesis import strategies as st

from app.accounting import filters as flt
from app.accounting.curve import PrivacyCurve
from app.accounting.filters import Budget, Filter, FilterKind
from app.accounting.mechanisms import Gaussian, Laplace, mechanism_from_dict

SPLIT = [FilterKind.ZCDP_FILTER, FilterKind.RDP_FIXED_ORDERS]
BUDGET = Budget(3.0, 1e-5)
D = 4e-6


def _float_at_least(x: Fraction) -> float:
    """The least float >= x (exact rational arithmetic)."""
    f = float(x)
    return f if Fraction(f) >= x else math.nextafter(f, math.inf)


def _float_at_most(x: Fraction) -> float:
    """The greatest float <= x."""
    f = float(x)
    return f if Fraction(f) <= x else math.nextafter(f, -math.inf)


CAP = _float_at_least(Fraction(D) * (1 + Fraction(1, 2**30)))
"""What the deltas' rounded-up sum may reach under the split: D (1 + 2^-30), rounded up."""
GOOD = Budget(3.0, _float_at_most(Fraction(BUDGET.delta) - Fraction(CAP)))


def _approx(eps: float, delta: float, count: int = 1) -> PrivacyCurve:
    return mechanism_from_dict(
        {"mechanism": "approx_dp", "epsilon": eps, "delta": delta, "count": count}
    ).curve()


def _without_delta(c: PrivacyCurve) -> PrivacyCurve:
    return dataclasses.replace(c, delta=0.0)


@pytest.mark.parametrize("kind", SPLIT)
def test_the_rule_is_the_one_made_for_what_is_left(kind: FilterKind) -> None:
    f = Filter.create(kind, BUDGET, entry_delta=D)
    good = Filter.create(kind, GOOD)
    assert f.budget == BUDGET and f.entry_delta == D
    assert f.entry_delta_cap == CAP and 0 < CAP - D <= 2**-29 * D
    assert f.bound == good.bound and f.params == good.params
    # a budget change keeps the orders (and the split)
    if kind is FilterKind.RDP_FIXED_ORDERS:
        assert f.params is not None
        kept = Filter.create(kind, Budget(4.0, 2e-5), orders=f.params.orders, entry_delta=D)
        assert kept.params is not None and kept.params.orders == f.params.orders


@pytest.mark.parametrize("kind", SPLIT)
def test_spend_converts_at_the_target_less_the_split(kind: FilterKind) -> None:
    f = Filter.create(kind, BUDGET, entry_delta=D)
    good = Filter.create(kind, GOOD)
    total = Laplace(epsilon=0.1, count=5).curve() + _approx(0.2, 1e-6, count=3)
    s = f.spend(total)
    g = good.spend_at(_without_delta(total), GOOD.delta)
    assert (s.epsilon, s.method, s.delta) == (g.epsilon, g.method, BUDGET.delta)
    # the same whatever the entries' deltas add up to within the split
    assert f.spend(_without_delta(total)).epsilon == s.epsilon
    # delta at an epsilon: the good part's plus the whole split
    d = f.spend_delta(total, 2.0)
    assert d.delta >= good.spend_delta(_without_delta(total), 2.0).delta + CAP * (1 - 1e-15)
    # no guarantee at a target at or below the split
    assert f.spend_at(total, D).epsilon == math.inf


@pytest.mark.parametrize("kind", SPLIT)
def test_deltas_are_admitted_up_to_the_split_and_not_beyond(kind: FilterKind) -> None:
    f = Filter.create(kind, BUDGET, entry_delta=D)
    step = _approx(0.01, 1e-6)
    assert f.admits(step.scaled(4))  # 4e-6 = D
    over = step.scaled(5)
    assert not f.admits(over)
    assert not f.dry_run(PrivacyCurve.zero(), None, over).admitted
    assert f.spend(over).method == flt.ENTRY_DELTAS_BEYOND_SET_ASIDE
    assert f.spend(over).epsilon == math.inf and f.spend_delta(over, 1.0).delta == 1.0
    if f.bound is not None:
        assert f.rho_bound(step.scaled(4)) == f.bound
        assert f.rho_bound(over) == 0.0
    assert f.remaining(step).entry_delta == pytest.approx(3e-6, rel=1e-12)
    assert f.remaining(step).entry_delta <= D - 1e-6
    assert f.remaining(over).entry_delta == 0.0
    assert Filter.create(kind, BUDGET).remaining(PrivacyCurve.zero()).entry_delta is None


@settings(max_examples=100, deadline=None)
@given(
    kind=st.sampled_from(SPLIT),
    delta=st.floats(1e-300, 1e-7, allow_subnormal=False),
    k=st.integers(1, 1000),
)
def test_deltas_whose_exact_sum_is_the_split_are_all_admitted(
    kind: FilterKind, delta: float, k: int
) -> None:
    """k charges of delta each, added one by one as a ledger's running total adds them (each
    sum rounded up), against a split of k x delta (the least float at or above it): every one is
    admitted, and one more is not. Before ``entry_delta_cap``, four 1e-6 in a split of 4e-6
    refused the fourth (their rounded-up sum was 4.000000000000001e-06)."""
    split = _float_at_least(Fraction(delta) * k)
    budget = Budget(3.0, 1e-5 if split < 5e-6 else 2.0 * split)
    f = Filter.create(kind, budget, entry_delta=split)
    step = _approx(0.0001, delta)
    total = PrivacyCurve.zero()
    for _ in range(k):
        total = total + step
        assert f.entry_deltas_fit(total)
    assert Fraction(total.delta) >= Fraction(delta) * k  # the running sum is never below it
    assert not f.entry_deltas_fit(total + step)


def test_four_millionths_fit_a_split_of_four_millionths() -> None:
    """The case that was refused (stop 37's known limit), with its figures."""
    total = PrivacyCurve.zero()
    for _ in range(4):
        total = total + _approx(0.1, 1e-6)
    assert total.delta == 4.000000000000001e-06 > 4e-6  # rounded up on the way
    for kind in SPLIT:
        f = Filter.create(kind, BUDGET, entry_delta=4e-6)
        assert f.admits(total)
        assert f.remaining(total).entry_delta == 0.0


@pytest.mark.parametrize("kind", SPLIT)
def test_a_split_that_leaves_the_rule_nothing_is_refused(kind: FilterKind) -> None:
    """D < delta_B, but D (1 + 2^-30) is not: 422 at creation, not a filter made for 0."""
    almost = _float_at_most(Fraction(BUDGET.delta) * (1 - Fraction(1, 2**31)))
    assert almost < BUDGET.delta
    with pytest.raises(ValueError, match="leaves nothing of the budget delta"):
        Filter.create(kind, BUDGET, entry_delta=almost)


@settings(max_examples=60, deadline=None)
@given(
    kind=st.sampled_from(SPLIT),
    n_gauss=st.integers(0, 400),
    n_approx=st.integers(0, 8),
    eps=st.floats(0.001, 0.3),
    delta=st.floats(0.0, 1e-6),
)
def test_admission_is_the_split_and_the_smaller_budget(
    kind: FilterKind, n_gauss: int, n_approx: int, eps: float, delta: float
) -> None:
    """Admitted iff the entries' deltas fit in the split and the filter made for the smaller
    budget admits the rest; never admits a delta-free ledger the plain filter refuses."""
    f = Filter.create(kind, BUDGET, entry_delta=D)
    good = Filter.create(kind, GOOD)
    plain = Filter.create(kind, BUDGET)
    total = PrivacyCurve.zero()
    if n_gauss:
        total = total + Gaussian(sigma=10.0, count=n_gauss).curve()
    if n_approx:
        total = total + _approx(eps, delta, count=n_approx)
    fits = total.delta <= CAP
    assert f.admits(total) == (fits and good.admits(_without_delta(total)))
    if total.delta == 0.0 and f.admits(total):
        assert plain.admits(total)
        assert f.spend(total).epsilon >= plain.spend(total).epsilon


@pytest.mark.parametrize(
    ("kind", "value", "message"),
    [
        (FilterKind.RDP, 1e-6, "non-adaptive"),
        (FilterKind.ZCDP, 1e-6, "non-adaptive"),
        (FilterKind.PLD, 1e-6, "non-adaptive"),
        (FilterKind.GDP, 1e-6, "Gaussian mechanisms only"),
        (FilterKind.RDP_UNION_BOUND, 1e-6, "earlier version"),
        (FilterKind.ZCDP_FILTER, 1e-5, r"must be in \[0"),
        (FilterKind.ZCDP_FILTER, -1e-9, r"must be in \[0"),
        (FilterKind.RDP_FIXED_ORDERS, math.nan, r"must be in \[0"),
        (FilterKind.RDP_FIXED_ORDERS, math.inf, r"must be in \[0"),
    ],
)
def test_a_split_is_refused_where_it_has_no_meaning(
    kind: FilterKind, value: float, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        Filter.create(kind, BUDGET, entry_delta=value)


@pytest.mark.parametrize("kind", SPLIT)
@pytest.mark.parametrize(("eps", "delta", "k"), [(0.5, 1e-7, 8), (0.1, 5e-7, 8), (1.0, 0.0, 2)])
def test_never_below_the_optimal_composition(kind: FilterKind, eps: float, delta: float, k: int):
    """dp_accounting's PLD composes (eps, delta) and Laplace optimally for parameters fixed in
    advance: an adaptive filter's spend at the budget delta is never below it."""
    f = Filter.create(kind, BUDGET, entry_delta=D)
    total = _approx(eps, delta, count=k) + Laplace(epsilon=0.2, count=4).curve()
    ours = f.spend(total)
    theirs = (
        pld.from_privacy_parameters(
            common.DifferentialPrivacyParameters(eps, delta), value_discretization_interval=1e-4
        )
        .self_compose(k)
        .compose(
            pld.from_laplace_mechanism(5.0, value_discretization_interval=1e-4).self_compose(4)
        )
        .get_epsilon_for_delta(BUDGET.delta)
    )
    assert ours.epsilon >= theirs
