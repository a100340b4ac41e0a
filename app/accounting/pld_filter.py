"""Admission by a composed privacy loss distribution (datasets with ``accounting: "pld"``).

A ``pld`` dataset keeps the pessimistic PLD of its whole ledger (``pld.Pld``, bounded size,
losses rounded up), so a charge composes ONE new entry into it. Every parameter is fixed
before any output is seen (``adaptive: false``), the setting dp_accounting's and Opacus'
accountants assume; no PLD filter is valid under adaptivity (``filters.filter_kind``).

* admission: the ledger with the new entry (and the active holds) satisfies
  ``delta(eps_B) <= delta_B``; the distribution's ``delta`` is the hockey-stick divergence of
  the pessimistic PLD, an upper bound on the true delta [Meiser, Mohammadi 2018; Koskela et al.
  2020; dp_accounting's ``privacy_loss_distribution``], and entries' own deltas are part of
  their PLDs (an (epsilon, delta)-DP entry's PLD has mass delta at +infinity), so nothing is
  added on the side;
* the reported spend: ``epsilon(delta_B)`` of the same distribution, capped at eps_B when the
  ledger is admitted (the least epsilon is found by search; the check above is exact in the
  direction that matters).
"""

from __future__ import annotations

from dataclasses import dataclass

from app.accounting import conversions as conv
from app.accounting.filters import Budget, Spend
from app.accounting.pld import Pld

METHOD = "pld"


@dataclass(frozen=True)
class PldDryRun:
    """``admitted`` is decided on committed + held + new; ``after`` = committed + new."""

    admitted: bool
    after: Pld
    spend_after: Spend


@dataclass(frozen=True)
class PldFilter:
    """A ``pld`` dataset's admission rule for its ``budget``."""

    budget: Budget

    def within(self, state: Pld) -> bool:
        """The ledger composing to ``state`` is within budget: delta(eps_B) <= delta_B."""
        return state.delta(self.budget.epsilon) <= self.budget.delta

    def spend_at(self, state: Pld, delta: float) -> Spend:
        """The least epsilon at ``delta`` the distribution certifies."""
        delta = conv.check_delta(delta)
        eps = state.epsilon(delta)
        return Spend(eps, delta, METHOD, candidates={METHOD: eps})

    def spend(self, state: Pld) -> Spend:
        """``spend_at`` the budget delta, capped at eps_B while the ledger is admitted."""
        s = self.spend_at(state, self.budget.delta)
        if s.epsilon > self.budget.epsilon and self.within(state):
            return Spend(self.budget.epsilon, s.delta, METHOD, candidates=s.candidates)
        return s

    def spend_delta(self, state: Pld, epsilon: float) -> Spend:
        """The delta at ``epsilon`` the distribution certifies."""
        epsilon = conv.check_epsilon(epsilon)
        d = state.delta(epsilon)
        return Spend(epsilon, d, METHOD, candidates={METHOD: d})

    def dry_run(self, committed: Pld, held: Pld | None, new: Pld) -> PldDryRun:
        """May ``new`` be charged? One composition (two with holds), one exact check, and the
        spend of ``after`` for the report."""
        after = committed.compose(new)
        everything = after if held is None else after.compose(held)
        admitted = self.within(everything)
        return PldDryRun(admitted=admitted, after=after, spend_after=self.spend(after))


__all__ = ["METHOD", "PldDryRun", "PldFilter"]
