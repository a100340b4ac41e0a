"""Archive and warning threshold per dataset

``dataset.archived_at`` (null: active) retires a dataset: it refuses charges and reservations
and is hidden from the default listing; its ledger stays readable. ``dataset.warning_threshold``
is the fraction of the budget epsilon at which the dataset's state turns ``warning``.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from app.db.migrate import refuse_populated_downgrade

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("dataset", schema=None) as batch_op:
        batch_op.add_column(sa.Column("archived_at", sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(
            sa.Column("warning_threshold", sa.Float(), nullable=False, server_default="0.8")
        )


def downgrade() -> None:
    refuse_populated_downgrade()  # archive marks and thresholds would be lost
    with op.batch_alter_table("dataset", schema=None) as batch_op:
        batch_op.drop_column("warning_threshold")
        batch_op.drop_column("archived_at")
