"""held sums in the totals row; entries' own deltas; expiry indexes; no redundant ledger index

Active reservations are summed into ``dataset_total`` (``held_count``, ``held``,
``held_next_expiry``) so that admission reads no reservation row unless one is due; due
holds are found through indexes on ``expires_at``. Existing active reservations are summed
by the next revision (0005), which re-derives every stored curve on the current grid first.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from app.db.migrate import refuse_populated_downgrade

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    for table in ("ledger_entry", "reservation", "dataset_total"):  # entries' own deltas
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.add_column(sa.Column("delta", sa.Float(), nullable=False, server_default="0"))
    with op.batch_alter_table("dataset_total", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("held_count", sa.BigInteger(), nullable=False, server_default="0")
        )
        batch_op.add_column(sa.Column("held", sa.LargeBinary(), nullable=True))
        batch_op.add_column(
            sa.Column("held_next_expiry", sa.DateTime(timezone=True), nullable=True)
        )
    with op.batch_alter_table("ledger_entry", schema=None) as batch_op:
        # the (dataset_id, seq) unique index serves every lookup by dataset
        batch_op.drop_index("ix_ledger_entry_dataset_id")
    with op.batch_alter_table("reservation", schema=None) as batch_op:
        batch_op.drop_index("ix_reservation_dataset_status")
        batch_op.create_index(
            "ix_reservation_dataset_status_expires", ["dataset_id", "status", "expires_at"]
        )
        batch_op.create_index("ix_reservation_status_expires", ["status", "expires_at"])


def downgrade() -> None:
    refuse_populated_downgrade()
    with op.batch_alter_table("ledger_entry", schema=None) as batch_op:
        batch_op.create_index("ix_ledger_entry_dataset_id", ["dataset_id"])
    with op.batch_alter_table("reservation", schema=None) as batch_op:
        batch_op.drop_index("ix_reservation_status_expires")
        batch_op.drop_index("ix_reservation_dataset_status_expires")
        batch_op.create_index("ix_reservation_dataset_status", ["dataset_id", "status"])
    with op.batch_alter_table("dataset_total", schema=None) as batch_op:
        batch_op.drop_column("held_next_expiry")
        batch_op.drop_column("held")
        batch_op.drop_column("held_count")
    for table in ("ledger_entry", "reservation", "dataset_total"):
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.drop_column("delta")
