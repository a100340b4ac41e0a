"""Admission by a composed privacy loss distribution (datasets with ``accounting: "pld"``).

A ``pld`` dataset keeps the pessimistic PLD of its whole ledger (``pld.Pld``, bounded size,
losses rounded up), so a charge composes ONE new entry into it. Every parameter is fixed
before any output is seen (``adaptive: false``), the setting dp_accounting's and Opacus'
accountants assume; no PLD filter is valid under adaptivity (``filters.filter_kind``).

The dataset also keeps the composed RDP curve of the same ledger (every dataset does), and its
non-adaptive conversions (``filters.FilterKind.PLD``: the ``rdp`` rule) are a second valid
bound for the same fixed-parameter composition. A mechanism that is (eps1, delta)-DP and
(eps2, delta)-DP is (min(eps1, eps2), delta)-DP, so the dataset answers with the smaller of
the two, as ``POST /v1/accounting/compose`` does with ``accounting: "pld"``. The PLD is the
tighter one for most ledgers; the curve wins where the PLD's discretisation dominates (many
repetitions of a tiny loss: 10^9 Laplace charges of epsilon 3.4e-8 at delta 1e-6 compose to
0.22 by the PLD and 0.0033 by the RDP conversion), and for Gaussian-only ledgers, where the
exact Gaussian conversion is exact and the pessimistic PLD is above it by its rounding.

* admission: the ledger with the new entry (and the active holds) satisfies
  ``delta(eps_B) <= delta_B`` by its PLD, or the curve rule admits its composed curve. The
  distribution's ``delta`` is the hockey-stick divergence of the pessimistic PLD, an upper
  bound on the true delta [Meiser, Mohammadi 2018; Koskela et al. 2020; dp_accounting's
  ``privacy_loss_distribution``]; entries' own deltas are part of their PLDs (an
  (epsilon, delta)-DP entry's PLD has mass delta at +infinity), and the curve rule converts at
  what they leave of the target delta (``filters`` module docstring);
* the reported spend: the least of ``epsilon(delta_B)`` of the distribution and the curve
  rule's candidates, capped at eps_B when the ledger is admitted by its PLD (the least epsilon
  is found by search; the check above is exact in the direction that matters).
"""

from __future__ import annotations

from dataclasses import dataclass

from app.accounting import conversions as conv
from app.accounting.curve import PrivacyCurve
from app.accounting.filters import Budget, Filter, Spend, with_holds_bound
from app.accounting.pld import LEFT_TAIL_MASS, RIGHT_TAIL_MASS, Pld

METHOD = "pld"

REORDER_SLACK = LEFT_TAIL_MASS + RIGHT_TAIL_MASS
"""Delta set aside, per term beyond the first, when admission checks a ledger beside active holds
(4 times as much where FFTs run in double precision, ``DOUBLE_REORDER_FACTOR``). Admission checks
(committed + new) + held, the holds composed together; each hold's commit is then one more
convolution into the stored ledger, with its own trimmed tails (at most ``LEFT_TAIL_MASS`` +
``RIGHT_TAIL_MASS`` of delta) and FFT error bound (about 1e-12 per charge in double precision,
2,000 times less in long double), so the stored PLD after the commits, in any order, certifies
more delta than the one checked: measured at most 1.0e-13 per hold over 60 random ledgers and
orders; a Laplace at the edge beside 3 holds ended 2.2e-8 over the budget epsilon before
(``tests/api/test_hold_commit_order.py``)."""

DOUBLE_REORDER_FACTOR = 4


@dataclass(frozen=True)
class PldDryRun:
    """``admitted`` is decided on committed + held + new; ``after`` = committed + new (its PLD
    and its curve)."""

    admitted: bool
    after: Pld
    after_curve: PrivacyCurve
    spend_after: Spend


def least(by_pld: float, by_curve: Spend, *, at_epsilon: bool = False) -> Spend:
    """The least of the PLD's value (an epsilon, or with ``at_epsilon`` a delta) and the curve
    rule's candidates; ties go to the method name first in order. The compose route's
    ``accounting: "pld"`` and a ``pld`` dataset answer by it."""
    candidates = {**by_curve.candidates, METHOD: by_pld}
    method = min(candidates, key=lambda k: (candidates[k], k))
    order = None if method == METHOD else by_curve.order
    if at_epsilon:
        return Spend(by_curve.epsilon, candidates[method], method, order, candidates)
    return Spend(candidates[method], by_curve.delta, method, order, candidates)


def with_new_entry(committed: Pld, held: Pld | None, new: Pld) -> tuple[Pld, Pld]:
    """The ledger's PLD with one more entry (``after``) and with the active holds too
    (``everything``, what admission checks), composed in the one order every check uses, so
    that a calibration's checks and a charge's give the same bits."""
    after = committed.compose(new)
    return after, after if held is None else after.compose(held)


@dataclass(frozen=True)
class PldFilter:
    """A ``pld`` dataset's admission rule: its ``curves`` filter (kind ``pld``: the non-adaptive
    RDP conversions of the composed curve) and, through it, its budget."""

    curves: Filter

    @property
    def budget(self) -> Budget:
        return self.curves.budget

    def _pld_within(self, state: Pld, additions: int = 1) -> bool:
        """delta(eps_B) <= delta_B by ``state``, with ``REORDER_SLACK`` per term beyond the
        first that may reach the ledger in another order (``additions``)."""
        per_term = REORDER_SLACK * (1 if state.extended else DOUBLE_REORDER_FACTOR)
        slack = per_term * max(0, additions - 1)
        return state.delta(self.budget.epsilon) + slack <= self.budget.delta

    def within(self, state: Pld, curve: PrivacyCurve, additions: int = 1) -> bool:
        """The ledger composing to ``state`` (its PLD) and ``curve`` is within budget: by its
        PLD, delta(eps_B) <= delta_B, or by the curve rule; never once the entries' own deltas,
        added up (``curve.delta``), reach the budget delta, as under every other accounting
        (DESIGN: "once they reach the budget delta alone, nothing more is admitted"). The PLD
        composes them as 1 - prod(1 - delta_i), slightly less than their sum, and admitted two
        charges of delta_B / 2 and more after them. ``additions``: the terms of ``state`` that
        may reach the ledger in another order (the new entry and the active holds), each
        allowed ``REORDER_SLACK`` of delta (the curve's bound already covers them)."""
        if curve.delta >= self.budget.delta:
            return False
        return self._pld_within(state, additions) or self.curves.admits(curve)

    def spend_at(self, state: Pld, curve: PrivacyCurve, delta: float) -> Spend:
        """The least epsilon at ``delta`` the distribution or the curve certifies."""
        delta = conv.check_delta(delta)
        return least(state.epsilon(delta), self.curves.spend_at(curve, delta))

    def spend(self, state: Pld, curve: PrivacyCurve) -> Spend:
        """``spend_at`` the budget delta, capped at eps_B while the PLD admits the ledger."""
        s = self.spend_at(state, curve, self.budget.delta)
        if s.epsilon > self.budget.epsilon and self._pld_within(state):
            return Spend(self.budget.epsilon, s.delta, s.method, s.order, s.candidates)
        return s

    def spend_delta(self, state: Pld, curve: PrivacyCurve, epsilon: float) -> Spend:
        """The least delta at ``epsilon`` the distribution or the curve certifies."""
        epsilon = conv.check_epsilon(epsilon)
        return least(state.delta(epsilon), self.curves.spend_delta(curve, epsilon), at_epsilon=True)

    def _admission(
        self,
        committed: tuple[Pld, PrivacyCurve],
        held: tuple[Pld | None, PrivacyCurve | None],
        new: tuple[Pld, PrivacyCurve],
        additions: int = 1,
    ) -> tuple[bool, Pld, PrivacyCurve]:
        held_pld, held_curve = held
        after, everything = with_new_entry(committed[0], held_pld, new[0])
        after_curve = committed[1] + new[1]
        # the curve rule checks the bound on every order of commits, as ``Filter.dry_run``
        everything_curve = with_holds_bound(committed[1], held_curve, new[1], additions)
        admitted = self.within(everything, everything_curve, additions)
        return admitted, after, after_curve

    def admits(
        self,
        committed: tuple[Pld, PrivacyCurve],
        held: tuple[Pld | None, PrivacyCurve | None],
        new: tuple[Pld, PrivacyCurve],
        additions: int = 1,
    ) -> bool:
        """``dry_run``'s decision alone (the same compositions, no spend): a calibration's
        candidates."""
        return self._admission(committed, held, new, additions)[0]

    def dry_run(
        self,
        committed: tuple[Pld, PrivacyCurve],
        held: tuple[Pld | None, PrivacyCurve | None],
        new: tuple[Pld, PrivacyCurve],
        additions: int = 1,
    ) -> PldDryRun:
        """May ``new`` be charged? Each argument is a (PLD, curve) pair of the same entries (the
        active holds: None when there are none; ``additions``: the terms that may reach the
        ledger in another order, as ``Filter.dry_run``). One composition (two with holds), the
        PLD's exact check, the curve rule only when the PLD refuses, and the spend of
        ``after``."""
        admitted, after, after_curve = self._admission(committed, held, new, additions)
        return PldDryRun(admitted, after, after_curve, self.spend(after, after_curve))


__all__ = ["METHOD", "REORDER_SLACK", "PldDryRun", "PldFilter", "least", "with_new_entry"]
