"""The part of a dataset's (and an allocation's) delta set aside for entries with their own delta

``dataset.entry_delta_budget`` (default 0: such entries are refused, as before) is fixed at
creation: an adaptive filter then admits entries with their own delta (approx_dp; zcdp or rdp
with ``delta``) while their deltas add up to at most it, and its rule is made for the budget
delta less it (``app.accounting.filters``, docs/formulas.md §2.6). ``allocation.entry_delta_budget``
is an allocation's own (on a dataset that has one). Existing rows get 0, so their filters,
spends and admissions are unchanged.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from app.db.migrate import refuse_populated_downgrade

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("dataset", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("entry_delta_budget", sa.Float(), nullable=False, server_default="0")
        )
    with op.batch_alter_table("allocation", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("entry_delta_budget", sa.Float(), nullable=False, server_default="0")
        )


def downgrade() -> None:
    refuse_populated_downgrade()  # a dataset's split would be lost, and its filter with it
    with op.batch_alter_table("allocation", schema=None) as batch_op:
        batch_op.drop_column("entry_delta_budget")
    with op.batch_alter_table("dataset", schema=None) as batch_op:
        batch_op.drop_column("entry_delta_budget")
