"""Refusals: the 409 problem that says why an ask does not fit (which limit, the figures that
were compared, the entries' own deltas where they were the reason) and the rejection recorded.

``admission.decide`` answers whether an ask fits; this module only words and records a "no".
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy.orm import Session

from app.accounting.curve import PrivacyCurve
from app.accounting.filters import RHO_FILTERS, Filter, with_holds_bound
from app.db.models import Rejection, utcnow
from app.errors import BudgetExceeded
from app.services import answers
from app.services.admission import Ask, Decision
from app.services.state import DatasetState
from app.services.tallies import Tally


def _structure_fields(ask: Ask, dry: Decision) -> dict[str, Any]:
    """The problem members that say which limit refused an ask: on a dataset without budget
    structures always its own budget (``"dataset"``), so that every 409 names its limit."""
    if not dry.limits:
        return {"limit": "dataset", "limits": ["dataset"]}
    extra: dict[str, Any] = {"limit": dry.limits[0], "limits": list(dry.limits)}
    t = ask.target
    if t is not None and t.block_from is not None:
        extra["blocks"] = {"from": t.block_from, "to": t.block_to}
        extra["blocks_exceeded"] = list(dry.blocks_exceeded)
        if t.allocation is not None:
            extra["allocation_blocks_exceeded"] = list(dry.allocation_blocks_exceeded)
    if t is not None and t.allocation is not None:
        a = t.allocation
        extra["allocation"] = {
            "name": a.name,
            "budget": {"epsilon": a.budget.epsilon, "delta": a.budget.delta},
            "spent_epsilon": a.spent.epsilon,
        }
    return extra


def _own_deltas_beyond(tallies: Sequence[Tally], keys: Sequence[str], ask: Ask) -> str:
    """A clause for a refusal by tallies (blocks ``keys`` of ``tallies``, or an allocation: no
    keys) whose split of the delta the entries' own deltas would pass, holds counted (the
    reason then, whatever the epsilon); "" when none would."""
    for t in tallies:
        if keys and str(t.key) not in keys:
            continue
        where = f"in block {t.key} " if keys else ""
        clause = _own_delta_clause(t.filter, t.committed, t.held.total(), t.held.count, ask, where)
        if clause:
            return clause
    return ""


def _own_delta_clause(
    f: Filter,
    committed: PrivacyCurve,
    held: PrivacyCurve | None,
    holds: int,
    ask: Ask,
    where: str,
    field: str = "entry_delta_budget",
) -> str:
    """The clause of ``_own_deltas_beyond`` for one filter ``f`` (its setting ``field``) of a
    ledger composing to ``committed`` with ``holds`` active holds summing to ``held``: whether
    the ask's own delta passes its split, on the sum its dry run compared (``Filter.dry_run``);
    "" when the ask has no own delta, the deltas fit or ``f`` keeps no split."""
    if ask.curve.delta <= 0.0 or not f.rule.adaptive or f.entry_delta <= 0.0:
        return ""
    own = with_holds_bound(committed, held, ask.curve, holds + 1)
    if f.entry_deltas_fit(own):
        return ""
    total, limit = _beyond(own.delta, f.entry_delta)
    return (
        f"; the entries' own deltas {where}would add up to {total}, above the "
        f"{field} {limit} set aside for them"
    )


def _structure_detail(st: DatasetState, ask: Ask, dry: Decision) -> str | None:
    """The refusal's detail when a structure (not the plain dataset budget) refused."""
    first = dry.limits[0] if dry.limits else None
    t = ask.target
    if first == "dataset" and dry.blocks_exceeded and t is not None:
        b = st.budget
        return (
            f"refused: blocks {', '.join(dry.blocks_exceeded)} would exceed the per-block budget "
            f"(epsilon={b.epsilon:g}, delta={b.delta:g}; {st.filter.kind.value} filter, active "
            "reservations counted)"
            f"{_own_deltas_beyond(t.blocks, dry.blocks_exceeded, ask)}; no block was charged"
        )
    if first == "lifetime" and st.lifetime is not None:
        b = st.lifetime.budget
        clause = _own_delta_clause(
            st.lifetime,
            st.committed,
            st.held_curve,
            st.held.count,
            ask,
            "",
            "lifetime_entry_delta_budget",
        )
        return (
            f"refused: the composition of all charges would exceed the lifetime budget "
            f"(epsilon={b.epsilon:g}, delta={b.delta:g}; {st.filter.kind.value} filter, active "
            f"reservations counted){clause}"
        )
    if first == "allocation" and t is not None and t.allocation is not None:
        a = t.allocation
        where = (
            f" in blocks {', '.join(dry.allocation_blocks_exceeded)}"
            if dry.allocation_blocks_exceeded
            else ""
        )
        own = (
            _own_deltas_beyond(t.allocation_blocks, dry.allocation_blocks_exceeded, ask)
            if dry.allocation_blocks_exceeded
            else _own_deltas_beyond((a,), (), ask)
        )
        return (
            f"refused: allocation {a.name!r} would exceed its budget{where} "
            f"(epsilon={a.budget.epsilon:g}, delta={a.budget.delta:g}; {a.filter.kind.value} "
            f"filter, active reservations counted){own}; the dataset's budget was not the limit"
        )
    return None


def _beyond(value: float, limit: float) -> tuple[str, str]:
    """``value`` and the ``limit`` it exceeds (or reaches), to 6 significant figures, or as
    many more as it takes for the two to read as different numbers: "would reach 1, above the
    budget 1" said nothing (1.000000001 against 1, the least costly invocation calibrate
    tried), nor did deltas adding up to "0.3" against a budget delta 0.30000000000000004. Equal
    values read as equal."""
    for digits in range(6, 18):
        shown = f"{value:.{digits}g}", f"{limit:.{digits}g}"
        if float(shown[0]) != float(shown[1]) or not value > limit:
            # a number whose shortest exact form is shorter reads as that (0.3, not
            # 0.29999999999999999)
            return _shorter(shown[0], value), _shorter(shown[1], limit)
    return repr(value), repr(limit)


def _shorter(shown: str, x: float) -> str:
    exact = repr(x)
    return exact if len(exact) < len(shown) else shown


def refusal(st: DatasetState, ask: Ask, dry: Decision, *, dry_run: bool = False) -> BudgetExceeded:
    """The 409 problem for an ask that does not fit. Its detail states the figure the
    admission compared, the active holds counted (``would_spend`` is the spend after the
    charge alone, as a charge would report it)."""
    f, b = st.filter, st.budget
    held = None if st.is_pld else st.held_curve
    compared = (
        dry.after
        if held is None
        else with_holds_bound(st.committed, held, ask.curve, st.held.count + 1)
    )
    # the entries' own deltas, holds counted (a pld dataset's curve rule counts them too;
    # ``compared`` leaves its holds out, every other dataset's already counts them)
    own = (
        with_holds_bound(st.committed, st.held_curve, ask.curve, st.held.count + 1)
        if st.is_pld and st.held_curve is not None
        else compared
    )
    counted = " (with active reservations counted)" if st.held.count else ""
    if not f.entry_deltas_fit(own):
        # refused by the entries' own deltas alone, whatever the epsilon or rho: say so (the
        # figures below were not what refused it, and may well be within the budget)
        if f.rule.adaptive:
            total, limit = _beyond(own.delta, f.entry_delta)
            detail = (
                f"refused: the entries' own deltas would add up to {total}{counted}, "
                f"above the entry_delta_budget {limit} set aside for them "
                f"({f.kind.value} filter)"
            )
        else:
            total, limit = _beyond(own.delta, b.delta)
            detail = (
                f"refused: the entries' own deltas would add up to {total}{counted}, "
                f"reaching the budget delta {limit}: once they do, nothing more is admitted "
                f"({f.kind.value} filter)"
            )
    elif f.kind in RHO_FILTERS and compared.delta == 0.0:
        assert f.bound is not None
        rho, bound = _beyond(compared.rho, f.bound)
        detail = (
            f"refused: rho would reach {rho}{counted}, above the {f.kind.value} filter's "
            f"bound {bound} for budget (epsilon={b.epsilon:g}, delta={b.delta:g})"
        )
    elif st.is_pld and st.held_curve is not None:
        # the PLD with the holds is not at hand here: no figure that was not the one compared
        detail = (
            f"refused: the ledger with this charge and its {st.held.count} active "
            f"reservation(s) would exceed the budget (epsilon={b.epsilon:g}, "
            f"delta={b.delta:g}; pld filter); with this charge alone the spend would be "
            f"{dry.spend_after.epsilon:.6g}"
        )
    else:
        epsilon = dry.spend_after.epsilon if held is None else f.spend(compared).epsilon
        reached, budget = _beyond(epsilon, b.epsilon)
        detail = (
            f"refused: epsilon at delta={b.delta:g} would reach {reached}{counted}, above the "
            f"budget {budget} ({f.kind.value} filter)"
        )
    detail = _structure_detail(st, ask, dry) or detail
    if f.kind in RHO_FILTERS and ask.kind == "subsampled_gaussian":
        detail += (
            "; zcdp accounting gives DP-SGD no amplification by subsampling (it keeps each "
            "entry's rho only): training runs are accounted far more tightly on an rdp dataset"
        )
    return BudgetExceeded(
        detail,
        **_structure_fields(ask, dry),
        dataset_id=st.id,
        spent=answers.spent(st).model_dump(mode="json"),
        budget=answers.budget(st).model_dump(mode="json"),
        requested=answers.requested(st, ask.wire, ask.curve).model_dump(mode="json"),
        would_spend=answers.spent(st, dry.after, dry.spend_after).model_dump(mode="json"),
        dry_run=dry_run,
        # a partitioned dataset's `spent` composes all its charges: beside its per-block
        # `budget`, the lifetime budget that caps that composition
        **(
            {"lifetime_budget": lb.model_dump(mode="json")}
            if (lb := answers.lifetime_budget(st))
            else {}
        ),
    )


def refuse(
    session: Session, st: DatasetState, ask: Ask, dry: Decision, operation: str
) -> BudgetExceeded:
    """The 409 problem for a refused ask, its rejection recorded in this transaction."""
    problem = refusal(st, ask, dry)
    session.add(
        Rejection(
            dataset_id=st.id,
            created_at=utcnow(),
            operation=operation,
            mechanism=ask.wire,
            label=ask.label,
            metadata_=ask.metadata,
            key_id=ask.key_id,
            reason=problem.detail,
            spent=problem.extra["spent"],
            requested=problem.extra["requested"],
            budget=problem.extra["budget"],
        )
    )
    return problem


__all__ = ["refusal", "refuse"]
