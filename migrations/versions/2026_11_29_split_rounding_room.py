"""split filters made for the rounding room of the entries' own deltas

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-29

A dataset or allocation with an ``entry_delta_budget`` D admits the entries' own deltas while
their running sum, rounded up at every addition, is at most D (1 + 2^-30), and its filter's own
rule (the rho bound, or the fixed orders' thresholds) is made for the budget delta less that
(``app.accounting.filters.entry_delta_cap``): under 0010 the sum had to stay within D itself,
and four charges of 1e-6 did not fit a split of 4e-6 (their rounded-up sum is
4.000000000000001e-06). A rule made under 0010, for delta_B - D, would now let the guarantee
exceed delta_B by 2^-30 D, so this recomputes every split's rule from its budget, keeping its
fixed orders (as a budget change does). Rows without a split are untouched.

Their stored spends were converted at the target delta less D: if any rule changed, the curve
formulas stamp is cleared, so that ``privacy-ledger migrate`` (or an auto-migrating start-up)
rebuilds the totals once (``app.services.ledger.rederive_if_formulas_changed``), and ``/readyz``
says so until it has. A split so close to its budget delta that D (1 + 2^-30) reaches it leaves
the rule nothing; such a row stops the upgrade with the dataset named (lower its split first).
The downgrade changes nothing back (a 0010 rule for delta_B - D is looser than this one).
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

from app.accounting.adaptive import RenyiFilter
from app.accounting.filters import Budget, Filter, FilterKind, entry_delta_cap
from app.db.migrate import refuse_populated_downgrade

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

_DATASET = sa.table(
    "dataset",
    sa.column("id", sa.String),
    sa.column("filter", sa.String),
    sa.column("budget_epsilon", sa.Float),
    sa.column("budget_delta", sa.Float),
    sa.column("allowed_mechanisms", sa.JSON),
    sa.column("filter_bound", sa.Float),
    sa.column("filter_params", sa.JSON),
    sa.column("entry_delta_budget", sa.Float),
)
_ALLOCATION = sa.table(
    "allocation",
    sa.column("id", sa.String),
    sa.column("dataset_id", sa.String),
    sa.column("budget_epsilon", sa.Float),
    sa.column("budget_delta", sa.Float),
    sa.column("filter_bound", sa.Float),
    sa.column("filter_params", sa.JSON),
    sa.column("entry_delta_budget", sa.Float),
)
_SETTING = sa.table("app_setting", sa.column("key", sa.String), sa.column("value", sa.String))
_FORMULAS_STAMP = "curve_formulas_version"  # app.services.ledger.FORMULAS_SETTING


def _rule(
    what: str, kind: str, epsilon: float, delta: float, split: float, allowed: Any, params: Any
) -> tuple[float | None, dict[str, Any] | None]:
    """The bound and parameters of the split filter, made for delta less the split's cap."""
    if entry_delta_cap(split) >= delta:
        raise RuntimeError(
            f"{what} has an entry_delta_budget of {split!r} within 2^-30 of its budget delta "
            f"{delta!r}: its filter would have nothing left; lower entry_delta_budget before "
            "upgrading"
        )
    orders = RenyiFilter.from_dict(params).orders if params else None
    flt = Filter.create(FilterKind(kind), Budget(epsilon, delta), allowed, orders, split)
    return flt.bound, flt.params.to_dict() if flt.params is not None else None


def upgrade() -> None:
    conn = op.get_bind()
    changed = False
    kinds: dict[str, tuple[str, Any]] = {}
    for row in conn.execute(sa.select(_DATASET)).mappings().all():
        kinds[row["id"]] = (row["filter"], row["allowed_mechanisms"])
        if not row["entry_delta_budget"]:
            continue
        bound, params = _rule(
            f"dataset {row['id']}",
            row["filter"],
            row["budget_epsilon"],
            row["budget_delta"],
            row["entry_delta_budget"],
            row["allowed_mechanisms"],
            row["filter_params"],
        )
        if (bound, params) != (row["filter_bound"], row["filter_params"]):
            conn.execute(
                _DATASET.update()
                .where(_DATASET.c.id == row["id"])
                .values(filter_bound=bound, filter_params=params)
            )
            changed = True
    split = sa.select(_ALLOCATION).where(_ALLOCATION.c.entry_delta_budget > 0)
    for row in conn.execute(split).mappings().all():
        kind, allowed = kinds[row["dataset_id"]]
        bound, params = _rule(
            f"allocation {row['id']}",
            kind,
            row["budget_epsilon"],
            row["budget_delta"],
            row["entry_delta_budget"],
            allowed,
            row["filter_params"],
        )
        if (bound, params) != (row["filter_bound"], row["filter_params"]):
            conn.execute(
                _ALLOCATION.update()
                .where(_ALLOCATION.c.id == row["id"])
                .values(filter_bound=bound, filter_params=params)
            )
            changed = True
    if changed:
        conn.execute(_SETTING.delete().where(_SETTING.c.key == _FORMULAS_STAMP))


def downgrade() -> None:
    refuse_populated_downgrade()
