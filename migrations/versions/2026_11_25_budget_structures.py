"""budget structures: allocations (sub-budgets) and time-partitioned datasets

``allocation`` holds a dataset's sub-budgets with their running totals (the columns and codec of
``dataset_total``); ``dataset_block`` and ``allocation_block`` hold the running totals of each
time block of a partitioned dataset, and of each allocation in it, created by the first charge
or hold that touches the block. ``dataset`` gains its partition unit and optional lifetime
budget (with that budget's filter); ledger entries and reservations record the allocation and
block range they were charged to; API keys may be limited to allocations.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from app.db.migrate import refuse_populated_downgrade

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def _totals() -> list[sa.Column[object]]:
    """The running-totals columns (as ``dataset_total``'s)."""
    return [
        sa.Column("orders_version", sa.Integer(), nullable=False),
        sa.Column("rho", sa.Float(), nullable=False),
        sa.Column("rdp", sa.LargeBinary(), nullable=False),
        sa.Column("pure_eps", sa.Float(), nullable=False),
        sa.Column("gaussian_only", sa.Boolean(), nullable=False),
        sa.Column("delta", sa.Float(), nullable=False),
        sa.Column("entry_count", sa.BigInteger(), nullable=False),
        sa.Column("spent_epsilon", sa.Float(), nullable=False),
        sa.Column("spent_method", sa.String(length=32), nullable=False),
        sa.Column("held_count", sa.BigInteger(), nullable=False),
        sa.Column("held", sa.LargeBinary(), nullable=True),
    ]


def upgrade() -> None:
    with op.batch_alter_table("dataset", schema=None) as batch_op:
        batch_op.add_column(sa.Column("partition_unit", sa.String(length=8), nullable=True))
        batch_op.add_column(sa.Column("lifetime_budget_epsilon", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("lifetime_budget_delta", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("lifetime_filter_bound", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("lifetime_filter_params", sa.JSON(), nullable=True))
    for table in ("ledger_entry", "reservation"):
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.add_column(sa.Column("allocation_id", sa.String(length=32), nullable=True))
            batch_op.add_column(sa.Column("block_from", sa.String(length=16), nullable=True))
            batch_op.add_column(sa.Column("block_to", sa.String(length=16), nullable=True))
    with op.batch_alter_table("api_key", schema=None) as batch_op:
        batch_op.add_column(sa.Column("allocations", sa.JSON(), nullable=True))
    op.create_table(
        "allocation",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("dataset_id", sa.String(length=32), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("budget_epsilon", sa.Float(), nullable=False),
        sa.Column("budget_delta", sa.Float(), nullable=False),
        sa.Column("filter_bound", sa.Float(), nullable=True),
        sa.Column("filter_params", sa.JSON(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        *_totals(),
        sa.ForeignKeyConstraint(
            ["dataset_id"],
            ["dataset.id"],
            name=op.f("fk_allocation_dataset_id_dataset"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_allocation")),
        sa.UniqueConstraint("dataset_id", "name", name="uq_allocation_dataset_name"),
    )
    op.create_table(
        "dataset_block",
        sa.Column("dataset_id", sa.String(length=32), nullable=False),
        sa.Column("key", sa.String(length=16), nullable=False),
        *_totals(),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["dataset_id"],
            ["dataset.id"],
            name=op.f("fk_dataset_block_dataset_id_dataset"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("dataset_id", "key", name=op.f("pk_dataset_block")),
    )
    op.create_table(
        "allocation_block",
        sa.Column("allocation_id", sa.String(length=32), nullable=False),
        sa.Column("key", sa.String(length=16), nullable=False),
        *_totals(),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["allocation_id"],
            ["allocation.id"],
            name=op.f("fk_allocation_block_allocation_id_allocation"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("allocation_id", "key", name=op.f("pk_allocation_block")),
    )


def downgrade() -> None:
    refuse_populated_downgrade()
    op.drop_table("allocation_block")
    op.drop_table("dataset_block")
    op.drop_table("allocation")
    with op.batch_alter_table("api_key", schema=None) as batch_op:
        batch_op.drop_column("allocations")
    for table in ("reservation", "ledger_entry"):
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.drop_column("block_to")
            batch_op.drop_column("block_from")
            batch_op.drop_column("allocation_id")
    with op.batch_alter_table("dataset", schema=None) as batch_op:
        batch_op.drop_column("lifetime_filter_params")
        batch_op.drop_column("lifetime_filter_bound")
        batch_op.drop_column("lifetime_budget_delta")
        batch_op.drop_column("lifetime_budget_epsilon")
        batch_op.drop_column("partition_unit")
