"""A ``pld`` dataset's rule (``app.accounting.pld_filter``): both bounds of a fixed-parameter
ledger, its pessimistic PLD and its composed curve's non-adaptive conversions, hold, so the
rule admits by either and reports the least. Checked on random ledgers against the two
bounds computed on their own."""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.accounting import pld_mechanisms as pm
from app.accounting.curve import PrivacyCurve
from app.accounting.filters import Budget, Filter, FilterKind
from app.accounting.mechanisms import mechanism_from_dict
from app.accounting.pld import Pld, interval_for_budget
from app.accounting.pld_filter import METHOD, PldFilter

BUDGET = Budget(1.0, 1e-6)
INTERVAL = interval_for_budget(BUDGET.epsilon, BUDGET.delta)

mechanisms = st.one_of(
    st.builds(
        lambda s, c: {"mechanism": "gaussian", "sigma": s, "count": c},
        st.floats(2.0, 200.0),
        st.sampled_from([1, 10, 1000]),
    ),
    st.builds(
        lambda e, c: {"mechanism": "laplace", "epsilon": e, "count": c},
        st.floats(1e-8, 0.3),
        st.sampled_from([1, 10, 10**4]),
    ),
    st.builds(
        lambda e, k: {"mechanism": "randomized_response", "epsilon": e, "k": k},
        st.floats(0.001, 0.5),
        st.sampled_from([2, 5]),
    ),
)


def _both(ledger: list[dict]) -> tuple[Pld, PrivacyCurve]:
    curve = PrivacyCurve.zero()
    for m in ledger:
        curve = curve + mechanism_from_dict(m).curve()
    return pm.compose_all(ledger, interval=INTERVAL), curve


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(mechanisms, min_size=1, max_size=3), st.sampled_from([1e-9, 1e-6, 1e-3]))
def test_the_rule_is_the_least_of_its_two_bounds(ledger: list[dict], delta: float) -> None:
    state, curve = _both(ledger)
    curves = Filter.create(FilterKind.PLD, BUDGET)
    rule = PldFilter(curves)
    by_pld, by_curve = state.epsilon(delta), curves.spend_at(curve, delta).epsilon
    s = rule.spend_at(state, curve, delta)
    assert s.epsilon == min(by_pld, by_curve)
    assert s.method == METHOD or s.epsilon < by_pld
    assert s.candidates[METHOD] == by_pld
    d = rule.spend_delta(state, curve, 0.5)
    assert d.delta == min(state.delta(0.5), curves.spend_delta(curve, 0.5).delta)
    pld_admits = state.delta(BUDGET.epsilon) <= BUDGET.delta
    assert rule.within(state, curve) == (pld_admits or curves.admits(curve))
    spent = rule.spend(state, curve)
    if rule.within(state, curve):
        assert spent.epsilon <= BUDGET.epsilon
    else:
        assert spent.epsilon > BUDGET.epsilon or math.isinf(spent.epsilon)


def test_a_dry_run_counts_the_holds_in_both_bounds() -> None:
    """An ask that fits alone but not with the active holds is refused by both bounds."""
    curves = Filter.create(FilterKind.PLD, BUDGET)
    rule = PldFilter(curves)
    committed = _both([])
    ask = {"mechanism": "laplace", "epsilon": 0.6}
    new = _both([ask])
    alone = rule.dry_run(committed, (None, None), new)
    assert alone.admitted and alone.spend_after.epsilon <= 0.6
    held = rule.dry_run(committed, new, new)
    assert not held.admitted
    assert held.after_curve.rho == alone.after_curve.rho  # the holds are not in ``after``
