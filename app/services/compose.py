"""Stateless what-if: compose a fixed list of mechanisms and convert (non-adaptive)."""

from __future__ import annotations

import math
from typing import Any

from app import responses as r
from app.accounting import pld_mechanisms
from app.accounting.compose import compose_sequence
from app.accounting.filters import FilterKind, Spend, pure_spend, spend
from app.accounting.kinds.subsampled_gaussian import too_many_runs
from app.accounting.mechanisms import Mechanism
from app.accounting.orders import ORDERS
from app.accounting.pld import PldWork, PldWorkExceeded
from app.accounting.pld_filter import least
from app.db.engine import Database
from app.errors import Unprocessable
from app.principal import Caller
from app.services.answers import finite_or_none
from app.services.auth import authenticated


def _with_pld(entries: list[dict[str, Any]], delta: float, by_curve: Spend) -> Spend:
    """The least of the composed PLD's epsilon at ``delta`` and the curve rule's candidates;
    the curve rule's alone when building the PLD would pass the request's work limit
    (``pld_mechanisms.PLD_WORK_LIMIT``: one Laplace entry with count 10^9 took 4.5 s). The
    curve rule's candidates are the same sound bound of the same fixed-parameter composition
    that every ``pld`` answer is the least of (a ``pld`` dataset answers by it too), so this
    is looser, never unsound; ``conversions`` then has no ``"pld"`` member, which says so. (For
    such counts the curve rule is often the tighter anyway: 10^9 Laplace charges of 3.4e-8
    compose to 0.22 by the PLD, 0.0033 by the RDP conversion.) Refusing instead would answer
    nothing where a sound answer is cheap; a dataset refuses (``admission.entry_pld``), as its
    stored distribution must hold every entry."""
    try:
        work = PldWork(pld_mechanisms.PLD_WORK_LIMIT)
        return least(pld_mechanisms.compose_all(entries, work=work).epsilon(delta), by_curve)
    except PldWorkExceeded:
        return by_curve


def compose(
    db: Database, caller: Caller, mechanisms: list[Mechanism], delta: float, accounting: str
) -> r.Composition:
    """The tightest non-adaptive (epsilon at ``delta``) of the composed mechanisms.

    ``accounting`` = ``rdp``: minimum of the improved RDP conversion on the grid, the zCDP
    conversions, the pure-DP sum and (Gaussian-only) the exact conversion; ``zcdp``: the zCDP
    conversions and, Gaussian-only, the exact one; ``pld``: the composed privacy loss
    distribution (``app.accounting.pld``) beside every ``rdp`` candidate, all valid for a
    fixed list (the ``rdp`` candidates alone where the PLD would pass the request's work
    limit: ``_with_pld``). ``conversions`` lists every candidate. At ``delta`` = 0, the
    pure-DP sum for every accounting (422 when the mechanisms have none).
    """
    authenticated(db, caller)
    if (why := too_many_runs(mechanisms)) is not None:
        raise Unprocessable(why)
    try:
        # each kind's distinct curves computed together, summed in order as a dataset's
        # running total of the same charges is (bit for bit)
        total = compose_sequence(mechanisms)
        if delta == 0.0:  # the pure-DP sum, whatever the accounting
            sp = pure_spend(total)
            if not math.isfinite(sp.epsilon):
                raise ValueError(
                    "at delta 0 only the pure-DP sum holds, and these mechanisms have none "
                    "(a mechanism without a pure-DP bound, or an entry with its own delta): ask "
                    "at a delta above 0"
                )
        elif total.delta >= delta:
            raise ValueError(
                f"the mechanisms' own deltas add up to {total.delta:g}, which reaches the target "
                f"delta {delta:g}: no epsilon holds at it (ask at a larger delta)"
            )
        else:
            kind = FilterKind.ZCDP if accounting == "zcdp" else FilterKind.RDP
            sp = spend(kind, total, delta)
        if accounting == "pld" and delta > 0.0:
            sp = _with_pld([m.to_dict() for m in mechanisms], delta, sp)
    except pld_mechanisms.NoPldError as exc:
        raise Unprocessable(str(exc), accepted_accountings=exc.accepted) from None
    except ValueError as exc:
        raise Unprocessable(str(exc)) from None
    if not math.isfinite(sp.epsilon):
        raise Unprocessable(
            f"no finite epsilon at delta {delta:g} for these mechanisms ({sp.method})"
        )
    return r.Composition(
        accounting=accounting,
        delta=delta,
        epsilon=sp.epsilon,
        method=sp.method,
        order=sp.order,
        rho=finite_or_none(total.rho),
        pure_epsilon=finite_or_none(total.pure_eps),
        gaussian_only=total.gaussian_only,
        orders=[float(a) for a in ORDERS],
        rdp=[finite_or_none(float(x)) for x in total.rdp],
        conversions={k: v for k, v in sp.candidates.items() if math.isfinite(v)},
    )


__all__ = ["compose"]
