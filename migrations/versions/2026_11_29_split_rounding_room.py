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


def _remade(
    conn: sa.Connection, table: sa.TableClause, what: str, kind: str, allowed: Any, row: Any
) -> bool:
    """Make the split filter of ``row`` (a dataset's or an allocation's) again, for the budget
    delta less the split's cap, its fixed orders kept; whether its rule changed."""
    split, delta = row["entry_delta_budget"], row["budget_delta"]
    if entry_delta_cap(split) >= delta:
        raise RuntimeError(
            f"{what} {row['id']} has an entry_delta_budget of {split!r} within 2^-30 of its "
            f"budget delta {delta!r}: its filter would have nothing left; lower "
            "entry_delta_budget before upgrading"
        )
    params = row["filter_params"]
    orders = RenyiFilter.from_dict(params).orders if params else None
    flt = Filter.create(
        FilterKind(kind), Budget(row["budget_epsilon"], delta), allowed, orders, split
    )
    rule = (flt.bound, flt.params.to_dict() if flt.params is not None else None)
    if rule == (row["filter_bound"], params):
        return False
    conn.execute(
        table.update()
        .where(table.c.id == row["id"])
        .values(filter_bound=rule[0], filter_params=rule[1])
    )
    return True


def upgrade() -> None:
    conn = op.get_bind()
    changed = False
    kinds: dict[str, tuple[str, Any]] = {}
    for row in conn.execute(sa.select(_DATASET)).mappings().all():
        kinds[row["id"]] = (row["filter"], row["allowed_mechanisms"])
        if row["entry_delta_budget"]:
            changed |= _remade(
                conn, _DATASET, "dataset", row["filter"], row["allowed_mechanisms"], row
            )
    split = sa.select(_ALLOCATION).where(_ALLOCATION.c.entry_delta_budget > 0)
    for row in conn.execute(split).mappings().all():
        kind, allowed = kinds[row["dataset_id"]]
        changed |= _remade(conn, _ALLOCATION, "allocation", kind, allowed, row)
    if changed:
        conn.execute(_SETTING.delete().where(_SETTING.c.key == _FORMULAS_STAMP))


def downgrade() -> None:
    refuse_populated_downgrade()
