"""Indexes that serve a dataset's rejection and audit pages in their order

``GET /v1/rejections?dataset=`` and ``GET /v1/audit?dataset=`` page newest first by row id. The
rejection index ``(dataset_id, created_at)`` and the audit index ``(dataset_id)`` serve the
filter, not the order: PostgreSQL scanned the primary key backwards, dropping every newer row of
the other datasets (3,050 rows read for a 50-row page of the oldest of three datasets of 1,500),
or fetched all the dataset's rows and sorted them; SQLite sorted a dataset's rejections in a
temporary B-tree for every page. ``(dataset_id, id)`` serves both, as ``(dataset_id, seq)``
serves ledger pages. It replaces the audit index on ``dataset_id`` alone (a prefix of it); the
rejection index on ``(dataset_id, created_at)`` stays for time windows of a dataset.

Building them reads each table once and, on PostgreSQL, holds off writes to it meanwhile
(rejections, audit events), as any index this project's migrations create.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-01
"""

from __future__ import annotations

from alembic import op

from app.db.migrate import refuse_populated_downgrade

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("rejection", schema=None) as batch_op:
        batch_op.create_index("ix_rejection_dataset_id_id", ["dataset_id", "id"], unique=False)
    with op.batch_alter_table("audit_event", schema=None) as batch_op:
        batch_op.create_index("ix_audit_event_dataset_id_id", ["dataset_id", "id"], unique=False)
        batch_op.drop_index("ix_audit_event_dataset_id")


def downgrade() -> None:
    # nothing is lost here, but every step down is guarded alike: a partial downgrade stops at
    # the first step that would refuse, not one step later
    refuse_populated_downgrade()
    with op.batch_alter_table("audit_event", schema=None) as batch_op:
        batch_op.create_index("ix_audit_event_dataset_id", ["dataset_id"], unique=False)
        batch_op.drop_index("ix_audit_event_dataset_id_id")
    with op.batch_alter_table("rejection", schema=None) as batch_op:
        batch_op.drop_index("ix_rejection_dataset_id_id")
