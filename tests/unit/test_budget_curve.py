"""budget_rdp_curve: a ledger whose RDP value at one order equals the budget curve there spends
exactly the budget (the curve inverts the conversion the filter uses)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from app.accounting.curve import PrivacyCurve
from app.accounting.filters import Budget, FilterKind, admits, budget_rdp_curve, spend
from app.accounting.orders import ORDERS

BUDGETS = [Budget(0.5, 1e-9), Budget(1.0, 1e-6), Budget(8.0, 1e-5), Budget(30.0, 0.01)]


@pytest.mark.parametrize("kind", [FilterKind.RDP, FilterKind.RDP_UNION_BOUND])
@pytest.mark.parametrize("budget", BUDGETS, ids=str)
def test_touching_the_budget_curve_at_one_order_spends_the_budget(
    kind: FilterKind, budget: Budget
) -> None:
    limit = budget_rdp_curve(kind, budget)
    fits = np.flatnonzero(np.isfinite(limit) & (limit > 0))
    assert fits.size > 0
    for j in fits[:: max(1, fits.size // 12)]:
        rdp = np.full_like(ORDERS, 1e6)
        rdp[j] = limit[j]
        curve = PrivacyCurve(rho=1e9, rdp=rdp, pure_eps=1e9, gaussian_only=False)
        s = spend(kind, curve, budget.delta)
        # the order j certifies eps_B (up to the conversions' round-up), no order does better
        assert s.epsilon == pytest.approx(budget.epsilon, rel=1e-12, abs=1e-12)
        over = PrivacyCurve(rho=1e9, rdp=rdp * (1 + 1e-6), pure_eps=1e9, gaussian_only=False)
        assert not admits(kind, budget, over)


@pytest.mark.parametrize("kind", [FilterKind.ZCDP, FilterKind.ZCDP_FILTER])
@pytest.mark.parametrize("budget", BUDGETS, ids=str)
def test_rho_filters_budget_curve_is_the_bound_times_the_order(
    kind: FilterKind, budget: Budget
) -> None:
    limit = budget_rdp_curve(kind, budget)
    rho_b = float(limit[0] / ORDERS[0])
    np.testing.assert_allclose(limit, rho_b * ORDERS, rtol=1e-15)
    at = PrivacyCurve(rho=rho_b, rdp=limit, pure_eps=math.inf, gaussian_only=False)
    assert admits(kind, budget, at)
    assert not admits(kind, budget, PrivacyCurve(rho_b * (1 + 1e-9), limit, math.inf, False))
