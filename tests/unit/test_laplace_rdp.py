"""The Laplace RDP curve's two forms (``closed_forms.laplace_rdp``): the closed form
eps + log1p(q expm1(-t)) / (a - 1) and the series below a eps = 2^-5, each checked against
40-digit mpmath on both sides of the switch, the cancellation bound the closed form's rounding
analysis rests on, and every input layout giving the same values."""

from __future__ import annotations

import mpmath as mp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.accounting import closed_forms as cf
from app.accounting.orders import ORDERS

DPS = 40
RAISED = 2.0 * cf.LAPLACE_ERROR  # every value lies in [exact, exact (1 + RAISED)]


def _exact(alpha: float, eps: float) -> mp.mpf:
    with mp.workdps(DPS):
        a, e = mp.mpf(alpha), mp.mpf(eps)
        p = a / (2 * a - 1)
        return mp.log(p * mp.e ** ((a - 1) * e) + (1 - p) * mp.e ** (-a * e)) / (a - 1)


def _check(value: float, alpha: float, eps: float) -> None:
    exact = _exact(alpha, eps)
    with mp.workdps(DPS):
        assert mp.mpf(value) >= exact, (alpha, eps)
        assert mp.mpf(value) <= exact * (1 + mp.mpf(RAISED)), (alpha, eps)


@pytest.mark.parametrize("side", [1 - 1e-9, 1.0, 1 + 1e-9])
def test_both_forms_are_sound_and_tight_at_the_switch(side: float) -> None:
    """At every order, eps just below, at and just above 2^-5 / a."""
    eps = cf.LAPLACE_SERIES_BELOW / ORDERS * side
    got = cf.laplace_rdp(ORDERS, eps[:, None])
    for j, (alpha, e) in enumerate(zip(ORDERS.tolist(), eps.tolist(), strict=True)):
        _check(float(got[j, j]), alpha, e)


def test_the_cancellation_of_the_closed_form_stays_below_its_bound() -> None:
    """K = eps / eps(a) <= LAPLACE_MAX_CANCEL wherever a eps >= 2^-5 (1 - u): at the switch of
    every order and on a grid of eps up to 100 (ratio 1.5); K falls as eps grows (about
    2 / (a eps) near the switch, 1 far above it), so the largest is at the switch."""
    worst = 0.0
    for alpha in ORDERS[::2].tolist():
        start = cf.LAPLACE_SERIES_BELOW / alpha * (1 - 2.0**-52)
        previous = np.inf
        for e in start * 1.5 ** np.arange(0, 80):
            if e > 100.0:
                break
            k = float(mp.mpf(float(e)) / _exact(alpha, float(e)))
            assert k <= previous * (1 + 1e-9), (alpha, e)  # falling
            previous = k
            worst = max(worst, k)
    assert worst <= cf.LAPLACE_MAX_CANCEL
    assert worst > 50.0  # the bound is not vacuous: about 64 at the switch


def test_every_input_layout_gives_the_same_values() -> None:
    rng = np.random.default_rng(5)
    eps = np.exp(rng.uniform(np.log(1e-9), np.log(100.0), 300))
    grid = cf.laplace_rdp(ORDERS, eps[:, None])
    np.testing.assert_array_equal(cf.laplace_rdp(ORDERS[None, :], eps[:, None]), grid)
    np.testing.assert_array_equal(cf.laplace_rdp(ORDERS[::-1], eps[:, None])[:, ::-1], grid)
    np.testing.assert_array_equal(cf.laplace_rdp(ORDERS.copy(), eps[:, None]), grid)
    for i in (0, 17, 299):
        np.testing.assert_array_equal(cf.laplace_rdp(ORDERS, float(eps[i])), grid[i])
    assert cf.laplace_rdp(ORDERS, np.zeros((0, 1))).shape == (0, ORDERS.size)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    alpha=st.one_of(
        st.sampled_from(ORDERS.tolist()),
        st.floats(1.0 + 2.0**-20, 1e5, allow_nan=False),
    ),
    log_eps=st.floats(np.log(1e-9), np.log(100.0)),
)
def test_any_order_and_epsilon_within_the_rounding_bound(alpha: float, log_eps: float) -> None:
    eps = float(np.exp(log_eps))
    _check(float(cf.laplace_rdp(np.array([alpha]), eps)[0]), alpha, eps)


def _edge_epsilons() -> np.ndarray:
    """Sorted epsilons with t = (2a - 1) eps within a few ulps of 40 at grid orders, and a
    ledger's spread (1e-4 .. 0.05), tiny and huge ones."""
    rng = np.random.default_rng(9)
    edge = cf.LAPLACE_FLAT_T / (2.0 * ORDERS - 1.0)
    near = np.concatenate([edge * (1.0 + k * 2.0**-52) for k in (-3, -1, 0, 1, 3)])
    spread = rng.uniform(1e-4, 0.05, 3000)
    return np.sort(np.concatenate([near, spread, [1e-9, 1e-3, 0.3, 1.0, 5.0, 50.0, 100.0]]))


def test_the_flat_shortcut_changes_no_value(monkeypatch) -> None:
    """Where t >= 40 the grid evaluation adds eps to a value per order instead of evaluating
    expm1 and log1p (``_laplace_flat``): bit for bit the closed form, at the edge too (the
    element-by-element path below takes no shortcut)."""
    eps = _edge_epsilons()
    calls: list[int] = []
    flat = cf._laplace_flat

    def counted(e, table, out) -> None:
        calls.append(out.size)
        flat(e, table, out)

    monkeypatch.setattr(cf, "_laplace_flat", counted)
    grid = cf.laplace_rdp(ORDERS, eps[:, None])
    plain = cf.laplace_rdp(ORDERS[None, :], eps[:, None])  # closed form everywhere, then series
    np.testing.assert_array_equal(grid, plain)
    assert cf._flat_table() is None or sum(calls) > 0.1 * grid.size  # the shortcut was taken


def test_sorted_epsilons_skip_a_quarter_of_the_closed_form(monkeypatch) -> None:
    """Counted, not timed: for 20,000 sorted epsilons of a ledger (1e-4 .. 0.05), the closed
    form is evaluated at under 75 % of the elements (the series' and the flat columns of each
    block are left to them)."""
    if cf._flat_table() is None:
        print("this CPU's expm1 is not -1 from t = 40 on: the flat shortcut is off")
    evaluated: list[int] = []
    closed = cf._laplace_closed_form

    def counted(e, neg_t, q, am1, out) -> None:
        evaluated.append(out.size)
        closed(e, neg_t, q, am1, out)

    monkeypatch.setattr(cf, "_laplace_closed_form", counted)
    eps = np.sort(np.random.default_rng(7).uniform(1e-4, 0.05, 20_000))
    cf.laplace_rdp(ORDERS, eps[:, None])
    share = sum(evaluated) / (eps.size * ORDERS.size)
    assert share < (0.75 if cf._flat_table() is not None else 1.01), share
