"""PLD state per dataset; stored filter parameters

``dataset.filter_params`` holds the parameters of filters that have them (``rdp_fixed_orders``,
the new default for adaptive RDP datasets: its orders and thresholds, fixed at creation).
``dataset_pld`` holds the composed privacy loss distribution of each ``pld`` dataset and of its
active holds. Existing datasets keep the filter they were created with. An
``rdp_fixed_orders`` dataset found without parameters (only after a forced downgrade below this
revision and an upgrade) gets them re-derived from its budget, as at its creation.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-24
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from alembic import op

from app.accounting import pld_mechanisms
from app.accounting.adaptive import choose_filter
from app.accounting.pld import Pld, state_for_budget
from app.db.migrate import refuse_populated_downgrade

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("dataset", schema=None) as batch_op:
        batch_op.add_column(sa.Column("filter_params", sa.JSON(), nullable=True))
    op.create_table(
        "dataset_pld",
        sa.Column("dataset_id", sa.String(length=32), nullable=False),
        sa.Column("state", sa.LargeBinary(), nullable=False),
        sa.Column("held", sa.LargeBinary(), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["dataset_id"],
            ["dataset.id"],
            name=op.f("fk_dataset_pld_dataset_id_dataset"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("dataset_id", name=op.f("pk_dataset_pld")),
    )
    if op.get_bind().dialect.name == "postgresql":
        # float data compresses little: skip pglz, store the state out of line
        op.execute("ALTER TABLE dataset_pld ALTER COLUMN state SET STORAGE EXTERNAL")
        op.execute("ALTER TABLE dataset_pld ALTER COLUMN held SET STORAGE EXTERNAL")
    _rederive_filter_params()
    _recompose_missing_plds()


def _recompose_missing_plds() -> None:
    """A ``pld`` dataset found without its distributions (only after a forced downgrade below
    this revision, which dropped them, and an upgrade) gets them recomposed from its ledger and
    its active holds, identical mechanisms grouped, on the grid a new dataset with its budget
    gets: without them its charges and every ``verify`` answered 500."""
    bind = op.get_bind()
    rows = bind.execute(
        sa.text(
            "SELECT id, budget_epsilon, budget_delta FROM dataset WHERE accounting = 'pld' "
            "AND id NOT IN (SELECT dataset_id FROM dataset_pld)"
        )
    ).all()
    for row in rows:
        base = state_for_budget(row.budget_epsilon, row.budget_delta)
        ledger = _composed(bind, "ledger_entry", "", row.id, base)
        held = _composed(bind, "reservation", " AND status = 'active'", row.id, base)
        bind.execute(
            sa.text(
                "INSERT INTO dataset_pld (dataset_id, state, held, updated_at) "
                "VALUES (:d, :state, :held, :now)"
            ),
            {
                "d": row.id,
                "state": (ledger or base).to_bytes(),
                "held": None if held is None else held.to_bytes(),
                "now": datetime.now(UTC),
            },
        )


def _composed(bind: Any, table: str, where: str, dataset_id: str, base: Pld) -> Pld | None:
    """The PLD of the mechanisms of ``table``'s rows of the dataset (None without any)."""
    found = bind.execute(
        sa.text(f"SELECT mechanism FROM {table} WHERE dataset_id = :d{where}"), {"d": dataset_id}
    ).scalars()
    groups = Counter(
        json.dumps(m if isinstance(m, dict) else json.loads(m), sort_keys=True) for m in found
    )
    if not groups:
        return None
    total = Pld.identity(base.interval, base.extended)
    for mechanism, n in sorted(groups.items()):
        entry = pld_mechanisms.for_mechanism(json.loads(mechanism), interval=base.interval)
        total = total.compose(entry.self_compose(n))
    return total


def _rederive_filter_params() -> None:
    bind = op.get_bind()
    dataset = sa.table(
        "dataset",
        sa.column("id", sa.String),
        sa.column("budget_epsilon", sa.Float),
        sa.column("budget_delta", sa.Float),
        sa.column("allowed_mechanisms", sa.JSON),
        sa.column("filter", sa.String),
        sa.column("filter_params", sa.JSON),
    )
    rows = bind.execute(
        sa.select(
            dataset.c.id,
            dataset.c.budget_epsilon,
            dataset.c.budget_delta,
            dataset.c.allowed_mechanisms,
        ).where(dataset.c.filter == "rdp_fixed_orders", dataset.c.filter_params.is_(None))
    ).all()
    for row in rows:
        params = choose_filter(row.budget_epsilon, row.budget_delta, row.allowed_mechanisms)
        bind.execute(
            sa.update(dataset).where(dataset.c.id == row.id).values(filter_params=params.to_dict())
        )


def downgrade() -> None:
    refuse_populated_downgrade()
    op.drop_table("dataset_pld")
    with op.batch_alter_table("dataset", schema=None) as batch_op:
        batch_op.drop_column("filter_params")
