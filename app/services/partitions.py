"""Time-partitioned datasets: reading blocks, the /budget summary, budget changes (issue 15).

Admission itself lives in ``admission`` (``prepare`` / ``decide_structures``); this module
answers the reads: ``GET /v1/datasets/{id}/blocks?from=&to=`` (one statement over the block
rows of the range: O(blocks returned)) and the summary ``/budget`` gives of a partitioned
dataset (the most-spent block, the number of exhausted blocks: two indexed aggregate
statements over the dataset's block rows).
"""

from __future__ import annotations

from typing import Any, cast

from sqlalchemy import Table, func, or_, select
from sqlalchemy.orm import Session

from app import responses as r
from app.accounting.filters import Filter
from app.db.engine import Database
from app.db.models import Allocation, AllocationBlock, DatasetBlock
from app.errors import NotFound, Unprocessable
from app.principal import Caller
from app.services import answers, blocks, state
from app.services.auth import authenticated
from app.services.state import DatasetState
from app.services.tallies import ALLOCATION_BLOCK, BLOCK, Tallies, Tally, fill_next_expiry

_DB = cast(Table, DatasetBlock.__table__).c
_AB = cast(Table, AllocationBlock.__table__).c


def _exhausted_where(columns: Any, flt: Filter) -> Any:
    """SQL for ``Filter.exhausted`` on stored block totals: the entries' own deltas reach the
    budget delta, the spend reaches the budget epsilon, or (rho filters) rho reaches the bound."""
    b = flt.budget
    terms = [columns.delta >= b.delta, columns.spent_epsilon >= b.epsilon]
    if flt.bound is not None:
        terms.append(columns.rho >= flt.bound)
    return or_(*terms)


def most_spent(
    session: Session, tallies: Tallies, kind: str, owner: str, flt: Filter
) -> Tally | None:
    """The block of ``owner`` with the largest spend counting its active holds, as admission
    counts them (earliest key on a tie), or None. Stored spends leave the holds out, so the
    candidates are the block of the largest committed spend and every block holding budget
    (a block without holds spends no more than that one): O(blocks with holds) rows read, one
    tally built and converted per distinct sums among them (``Tallies.distinct_blocks``), where
    the committed spend alone reported a block with more left than a held one.

    A filter that admits by rho (``zcdp``, ``zcdp_filter``, ``gdp``): the block with the least
    rho left, then the largest spend. Its epsilon does not order blocks as its admission does
    (the exact Gaussian conversion reads less epsilon for a Gaussian block than for a Laplace
    block of less rho), so the blocks of the largest committed rho and own deltas (which lower a
    non-adaptive filter's rho bound) are candidates too."""
    c = _DB if kind == BLOCK else _AB
    owner_column = c.dataset_id if kind == BLOCK else c.allocation_id
    columns = (c.spent_epsilon, c.rho, c.delta) if flt.rule.by_rho else (c.spent_epsilon,)
    also = [
        key
        for column in columns
        if (
            key := session.scalar(
                select(c.key).where(owner_column == owner).order_by(column.desc(), c.key).limit(1)
            )
        )
        is not None
    ]
    if not also:
        return None
    # one tally and one conversion per distinct stored (charges, holds) pair, not per block
    groups = tallies.distinct_blocks(session, kind, owner, flt, also=also)
    first, _ = min(groups, key=lambda g: _fullest_first(flt, *g))
    return tallies.blocks(session, kind, owner, [first], flt, lock=False)[0]


def _fullest_first(flt: Filter, key: str, t: Tally) -> tuple[float, float, str]:
    """``most_spent``'s order: least rho left (filters that admit by rho), largest spend
    counting holds, earliest key."""
    if not flt.rule.by_rho:
        return 0.0, -answers.spend_with_holds(t).epsilon, key
    total, spend = answers.tally_with_holds(t)
    left = flt.remaining(total, spend).rho
    assert left is not None
    return left, -spend.epsilon, key


def summary(session: Session, st: DatasetState) -> dict[str, Any]:
    """``/budget`` of a partitioned dataset: ``blocks`` (most-spent block, exhausted and
    charged block counts) and ``lifetime`` (the composition of all charges)."""
    assert st.partition_unit is not None
    tallies = Tallies(st.id, st.filter.kind)
    top = most_spent(session, tallies, BLOCK, st.id, st.filter)
    fill_next_expiry(session, st.id, (top,))
    counts = session.execute(
        select(
            func.count().filter(_DB.entry_count > 0),  # rows made by holds alone: not charged
            func.count().filter(_exhausted_where(_DB, st.filter)),
        ).where(_DB.dataset_id == st.id)
    ).one()
    lifetime = st.lifetime
    return {
        "blocks": r.BlocksSummary(
            unit=st.partition_unit,
            most_spent=answers.block(top) if top is not None else None,
            exhausted_blocks=int(counts[1]),
            charged_blocks=int(counts[0]),
        ),
        "lifetime": r.Lifetime(
            budget=answers.lifetime_budget(st),
            spent=answers.spent(st),
            remaining=answers.remaining(st) if lifetime is not None else None,
            exhausted=answers.exhausted(st),
            filter_params=lifetime.params_dict() if lifetime is not None else None,
        ),
    }


def list_blocks(
    db: Database,
    caller: Caller,
    ref: str,
    first: str,
    last: str,
    allocation: str | None = None,
) -> r.BlockList:
    """Every block from ``first`` to ``last`` (inclusive, at most ``blocks.MAX_SPAN``), with
    spent, remaining and exhausted; blocks nobody charged have spent nothing. With
    ``allocation``: that allocation's share of each block."""
    with db.read() as s:
        principal = authenticated(db, caller, s)
        st = state.load(s, ref, principal)
        if st.partition_unit is None:
            raise Unprocessable(f"dataset {st.name!r} is not partitioned: it has no blocks")
        keys = blocks.block_range(st.partition_unit, first, last)
        tallies = Tallies(st.id, st.filter.kind)
        if allocation is None:
            rows = tallies.blocks(s, BLOCK, st.id, keys, st.filter, lock=False)
        else:
            try:
                a = tallies.allocation(s, allocation, lock=False)
            except Unprocessable:
                raise NotFound(f"no allocation {allocation!r} on dataset {st.name!r}") from None
            rows = tallies.blocks(s, ALLOCATION_BLOCK, a.owner, keys, a.filter, lock=False)
        fill_next_expiry(s, st.id, rows)
        return r.BlockList(
            dataset_id=st.id,
            unit=st.partition_unit,
            allocation=allocation,
            blocks=[answers.block(t) for t in rows],
        )


def rebudget(session: Session, st: DatasetState, kind: str, owner: str, flt: Filter) -> int:
    """A budget change on a partitioned dataset (``kind`` = block) or on an allocation of one
    (allocation_block): every stored block's spend is recomputed under ``flt`` (the spend is
    stated at the budget's delta). O(blocks of ``owner``); under the dataset's lock."""
    c = _DB if kind == BLOCK else _AB
    owner_column = c.dataset_id if kind == BLOCK else c.allocation_id
    keys = list(session.scalars(select(c.key).where(owner_column == owner).order_by(c.key)))
    tallies = st.tallies()
    for t in tallies.blocks(session, kind, owner, keys, flt):
        tallies.set_filter(t, flt)
    return len(keys)


def allocation_ids(session: Session, dataset_id: str) -> list[str]:
    return list(session.scalars(select(Allocation.id).where(Allocation.dataset_id == dataset_id)))


__all__ = ["allocation_ids", "list_blocks", "most_spent", "rebudget", "summary"]
