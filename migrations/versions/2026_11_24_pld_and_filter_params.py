"""PLD state per dataset; stored filter parameters

``dataset.filter_params`` holds the parameters of filters that have them (``rdp_fixed_orders``,
the new default for adaptive RDP datasets: its orders and thresholds, fixed at creation).
``dataset_pld`` holds the composed privacy loss distribution of each ``pld`` dataset and of its
active holds. Existing datasets keep the filter they were created with.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

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


def downgrade() -> None:
    refuse_populated_downgrade()
    op.drop_table("dataset_pld")
    with op.batch_alter_table("dataset", schema=None) as batch_op:
        batch_op.drop_column("filter_params")
