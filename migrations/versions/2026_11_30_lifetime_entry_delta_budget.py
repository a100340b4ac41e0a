"""The part of a lifetime budget's delta set aside for entries with their own delta

A partitioned dataset's ``entry_delta_budget`` sets part of each block's delta aside for entries
with their own delta (approx_dp; zcdp or rdp with ``delta``). Its lifetime budget, which composes
the charges of every block, had no such part, so a partitioned dataset with a lifetime budget
could not take those entries at all (when adaptive). ``dataset.lifetime_entry_delta_budget`` is
that part for the lifetime budget's filter, fixed at creation like the blocks'. Existing rows get
0, so their filters, spends and admissions are unchanged.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from app.db.migrate import refuse_populated_downgrade

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("dataset", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("lifetime_entry_delta_budget", sa.Float(), nullable=False, server_default="0")
        )


def downgrade() -> None:
    refuse_populated_downgrade()  # a lifetime budget's split would be lost, and its filter with it
    with op.batch_alter_table("dataset", schema=None) as batch_op:
        batch_op.drop_column("lifetime_entry_delta_budget")
