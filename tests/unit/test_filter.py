"""``Filter``: every method for every kind, the dry run against admits/spend, and the number of
conversions a dry run costs (counted, not timed)."""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction

import numpy as np
import pytest

from app.accounting import conversions as conv
from app.accounting import filters as flt
from app.accounting.curve import PrivacyCurve
from app.accounting.filters import Budget, DryRun, Filter, FilterKind, Remaining
from app.accounting.mechanisms import Gaussian, Laplace, SubsampledGaussian

BUDGET = Budget(2.0, 1e-6)
ALL = list(FilterKind)
RHO = [FilterKind.GDP, FilterKind.ZCDP, FilterKind.ZCDP_FILTER]
RDP = [FilterKind.RDP, FilterKind.RDP_UNION_BOUND]
# kinds whose spend depends on the budget alone (rdp_fixed_orders' depends on its stored orders)
BUDGETLESS = [k for k in ALL if k is not FilterKind.RDP_FIXED_ORDERS]


def _ledger(kind: FilterKind, n: int) -> PrivacyCurve:
    """n charges of a kind every filter accepts (Gaussian only for gdp)."""
    if kind is FilterKind.GDP:
        return Gaussian(sigma=8.0, count=n).curve()
    return (Gaussian(sigma=8.0).curve() + Laplace(epsilon=0.05).curve()).scaled(n)


def _first_refused(f: Filter, step: PrivacyCurve) -> int:
    total = PrivacyCurve.zero()
    for n in range(1, 10_000):
        total = total + step
        if not f.admits(total):
            return n
    raise AssertionError("never refused")


@pytest.mark.parametrize("kind", ALL)
def test_create_computes_the_bound_once_for_rho_filters_only(kind: FilterKind) -> None:
    f = Filter.create(kind, BUDGET)
    assert f.kind is kind and f.budget == BUDGET
    if kind in RHO:
        assert f.bound == flt.filter_bound(kind, BUDGET)
        assert f.bound is not None and f.bound > 0
    else:
        assert f.bound is None
    # a stored bound gives the same filter
    assert Filter(kind, BUDGET, f.bound, f.params) == f


def test_rho_filter_without_bound_is_refused() -> None:
    with pytest.raises(ValueError, match="needs its rho bound"):
        Filter(FilterKind.ZCDP, BUDGET)


def test_gdp_bound_is_the_exact_gaussian_budget() -> None:
    f = Filter.create(FilterKind.GDP, BUDGET)
    assert f.bound is not None
    mu = math.sqrt(2 * f.bound)
    assert conv.gaussian_delta(mu, BUDGET.epsilon) <= BUDGET.delta
    assert conv.gaussian_delta(mu * (1 + 1e-9), BUDGET.epsilon) > BUDGET.delta


def test_the_functional_spend_refuses_a_filter_with_stored_parameters() -> None:
    with pytest.raises(ValueError, match="stored parameters"):
        flt.spend(FilterKind.RDP_FIXED_ORDERS, _ledger(FilterKind.RDP, 1), 1e-9)
    with pytest.raises(ValueError, match="stored parameters"):
        flt.spend_delta(FilterKind.RDP_FIXED_ORDERS, _ledger(FilterKind.RDP, 1), 1.0)


@pytest.mark.parametrize("kind", BUDGETLESS)
def test_spend_methods_match_the_functional_interface(kind: FilterKind) -> None:
    f = Filter.create(kind, BUDGET)
    total = _ledger(kind, 3)
    assert f.spend_at(total, 1e-9) == flt.spend(kind, total, 1e-9)
    assert f.spend_delta(total, 1.5) == flt.spend_delta(kind, total, 1.5)
    assert f.spend(total) == flt.filter_spend(kind, total, BUDGET, f.bound)
    assert f.spend(total).delta == BUDGET.delta
    assert f.spend(total).epsilon == min(f.spend(total).candidates.values())
    np.testing.assert_array_equal(f.budget_curve(), flt.budget_rdp_curve(kind, BUDGET, f.bound))


@pytest.mark.parametrize("kind", ALL)
def test_admits_until_the_budget_is_spent(kind: FilterKind) -> None:
    f = Filter.create(kind, BUDGET)
    step = _ledger(kind, 1)
    n = _first_refused(f, step)
    assert n > 1
    within, over = step.scaled(n - 1), step.scaled(n)
    assert f.admits(within) and not f.admits(over)
    assert f.admits(within) == flt.admits(kind, BUDGET, within)
    assert f.spend(within).epsilon <= BUDGET.epsilon
    assert not f.exhausted(PrivacyCurve.zero())
    assert f.exhausted(over)
    if kind in RHO:
        assert f.bound is not None
        assert within.rho <= f.bound < over.rho
    else:
        assert f.spend(over).epsilon > BUDGET.epsilon


@pytest.mark.parametrize("kind", ALL)
def test_remaining(kind: FilterKind) -> None:
    f = Filter.create(kind, BUDGET)
    total = _ledger(kind, 2)
    r = f.remaining(total)
    assert isinstance(r, Remaining)
    assert r.epsilon == pytest.approx(BUDGET.epsilon - f.spend(total).epsilon, abs=1e-15)
    assert r.delta == BUDGET.delta
    if kind in RHO:
        assert f.bound is not None
        assert r.rho == pytest.approx(f.bound - total.rho, abs=1e-15)
    else:
        assert r.rho is None
    assert f.remaining(PrivacyCurve.zero()).epsilon == BUDGET.epsilon
    huge = _ledger(kind, 5000)
    assert f.remaining(huge).epsilon == 0.0
    assert f.remaining(huge).rho in (None, 0.0)


@pytest.mark.parametrize("kind", list(FilterKind))
def test_remaining_is_never_above_the_exact_difference(kind: FilterKind) -> None:
    """What remains is rounded down, never up (a spend is rounded up): 4 - 1e-17 in floats is
    4.0, above the exact 3.99999999999999999, so the remaining budget read a whole budget left
    beside a spend. Exact oracle: the difference of the two floats in rationals."""
    budget = Budget(4.0, 1e-6)
    f = Filter.create(kind, budget)
    total = Laplace(epsilon=1e-9).curve()
    sp = flt.Spend(1e-17, budget.delta, "pure_dp")
    left = f.remaining(total, sp)
    assert Fraction(left.epsilon) <= Fraction(4.0) - Fraction(1e-17)
    assert left.epsilon < 4.0
    if left.rho is not None:
        assert f.bound is not None
        assert Fraction(left.rho) <= Fraction(f.bound) - Fraction(total.rho)


def test_gdp_refuses_what_is_not_gaussian() -> None:
    f = Filter.create(FilterKind.GDP, BUDGET)
    mixed = Gaussian(sigma=100.0).curve() + Laplace(epsilon=1e-6).curve()
    assert not f.admits(mixed)
    assert f.exhausted(mixed)
    assert f.spend(mixed).epsilon == math.inf
    d = f.dry_run(PrivacyCurve.zero(), None, mixed)
    assert not d.admitted and d.spend_after.epsilon == math.inf


@pytest.mark.parametrize("kind", ALL)
@pytest.mark.parametrize("with_holds", [False, True])
def test_dry_run_agrees_with_admits_and_spend(kind: FilterKind, with_holds: bool) -> None:
    f = Filter.create(kind, BUDGET)
    step = _ledger(kind, 1)
    n = _first_refused(f, step)
    for committed_n in range(0, n + 1):
        committed = step.scaled(committed_n) if committed_n else PrivacyCurve.zero()
        held = step if with_holds else None
        d = f.dry_run(committed, held, step)
        assert isinstance(d, DryRun)
        assert d.after == committed + step
        assert d.spend_after == f.spend(committed + step)
        everything = committed + step + (held or PrivacyCurve.zero())
        assert d.admitted == f.admits(everything)


class _Counting:
    """Wraps a rule's conversion functions and counts the calls."""

    def __init__(self, rule: flt._Rule) -> None:
        self.calls = 0
        self.rule = dataclasses.replace(rule, epsilon=self._count(rule.epsilon))

    def _count(self, fn):
        def wrapped(*args):
            self.calls += 1
            return fn(*args)

        return wrapped


@pytest.mark.parametrize("kind", ALL)
def test_dry_run_converts_once_without_holds(kind: FilterKind, monkeypatch) -> None:
    f = Filter.create(kind, BUDGET)
    counting = _Counting(f.rule)
    if kind in flt._RULES:
        monkeypatch.setitem(flt._RULES, kind, counting.rule)
    else:
        monkeypatch.setattr(flt, "_fixed_orders_rule", lambda params: counting.rule)
    step = _ledger(kind, 1)
    f.dry_run(step, None, step)
    assert counting.calls == 1
    counting.calls = 0
    f.dry_run(step, step, step)
    # rho filters admit by comparing rho, so holds cost no conversion; RDP filters need the
    # spend of committed + held + new besides the reported one
    assert counting.calls == (1 if kind in RHO else 2)


def test_rho_filters_cap_the_reported_epsilon_at_the_bound() -> None:
    for kind in (FilterKind.ZCDP_FILTER, FilterKind.GDP):
        f = Filter.create(kind, BUDGET)
        assert f.bound is not None
        at_bound = PrivacyCurve(
            rho=f.bound, rdp=f.budget_curve(), pure_eps=math.inf, gaussian_only=True
        )
        assert f.admits(at_bound)
        assert f.spend(at_bound).epsilon <= BUDGET.epsilon


def test_subsampled_gaussian_on_rdp_filters() -> None:
    step = SubsampledGaussian(sigma=1.0, sample_rate=0.01, steps=100).curve()
    for kind in RDP:
        f = Filter.create(kind, Budget(3.0, 1e-5))
        d = f.dry_run(PrivacyCurve.zero(), None, step)
        assert d.admitted == (d.spend_after.epsilon <= 3.0)
        assert d.spend_after.order is not None


# --- entries with their own delta ----------------------------------------------------------


def _with_delta(curve: PrivacyCurve, delta: float) -> PrivacyCurve:
    return dataclasses.replace(curve, delta=delta, gaussian_only=False)


def test_entry_deltas_add_and_scale_rounding_up() -> None:
    a = _with_delta(Laplace(epsilon=0.1).curve(), 1e-7)
    b = _with_delta(Laplace(epsilon=0.2).curve(), 3e-7)
    assert (a + b).delta >= 4e-7
    assert (a + b).delta == pytest.approx(4e-7, rel=1e-15)
    assert a.scaled(10).delta == pytest.approx(1e-6, rel=1e-15)
    assert a.scaled(10**9).delta == 1.0  # capped: a probability
    assert (a + PrivacyCurve.zero()).delta == a.delta
    with pytest.raises(ValueError, match="delta must be in"):
        _with_delta(a, 1.5)
    with pytest.raises(ValueError, match="delta must be in"):
        _with_delta(a, float("nan"))


@pytest.mark.parametrize("kind", [FilterKind.RDP, FilterKind.ZCDP])
def test_conversions_use_what_the_entry_deltas_leave(kind: FilterKind) -> None:
    base = Laplace(epsilon=0.3, count=5).curve()
    total = _with_delta(base, 4e-7)
    f = Filter.create(kind, Budget(5.0, 1e-6))
    s = f.spend_at(total, 1e-6)
    plain = f.spend_at(dataclasses.replace(base, gaussian_only=False), 1e-6 - 4e-7)
    assert s.epsilon == plain.epsilon and s.method == plain.method and s.delta == 1e-6
    d = f.spend_delta(total, 2.0)
    assert d.delta == pytest.approx(f.spend_delta(base, 2.0).delta + 4e-7, rel=1e-12)
    assert d.delta >= f.spend_delta(base, 2.0).delta + 4e-7 * (1 - 1e-15)
    # nothing is left once the entries' deltas reach the target
    assert f.spend_at(total, 4e-7).epsilon == math.inf
    assert f.spend_at(total, 3e-7).epsilon == math.inf


@pytest.mark.parametrize("kind", [FilterKind.RDP, FilterKind.ZCDP])
def test_non_adaptive_filters_admit_entry_deltas_by_conversion(kind: FilterKind) -> None:
    budget = Budget(5.0, 1e-6)
    f = Filter.create(kind, budget)
    small = _with_delta(Laplace(epsilon=0.3).curve(), 1e-7)
    assert f.admits(small)
    assert f.admits(small) == (f.spend(small).epsilon <= budget.epsilon)
    d = f.dry_run(PrivacyCurve.zero(), None, small)
    assert d.admitted and d.spend_after == f.spend(small)
    assert f.remaining(small).delta == pytest.approx(9e-7, rel=1e-12)
    assert f.remaining(small).delta <= 1e-6 - 1e-7
    # the entries' deltas alone reach the budget delta: nothing more is admitted
    full = _with_delta(Laplace(epsilon=1e-6).curve(), 1e-6)
    assert not f.admits(full) and f.exhausted(full)
    assert not f.dry_run(PrivacyCurve.zero(), None, full).admitted
    assert f.remaining(full).delta == 0.0


@pytest.mark.parametrize(
    "kind", [FilterKind.GDP, FilterKind.ZCDP_FILTER, FilterKind.RDP_UNION_BOUND]
)
def test_adaptive_filters_refuse_entry_deltas(kind: FilterKind) -> None:
    f = Filter.create(kind, Budget(5.0, 1e-6))
    tiny = _with_delta(Laplace(epsilon=1e-6).curve(), 1e-15)
    assert not f.admits(tiny)
    assert f.exhausted(tiny)
    d = f.dry_run(PrivacyCurve.zero(), None, tiny)
    assert not d.admitted
    assert d.spend_after.epsilon == math.inf
    assert d.spend_after.method == flt.REFUSES_ENTRY_DELTA
    assert f.spend_delta(tiny, 1.0).delta == 1.0
