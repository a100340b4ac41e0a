"""spent_method columns widened to 64 characters

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-29

A partitioned dataset may now set part of each block's delta aside for entries with their own
delta (``entry_delta_budget``). The composition of all its charges (``dataset_total``, and an
allocation's own totals there) then has no guarantee once those deltas pass the split, and its
spend names why: ``entry_deltas_exceed_entry_delta_budget``, 38 characters, which PostgreSQL
refused in a ``VARCHAR(32)`` (a 500 on the charge; SQLite does not enforce the length). Every
running-totals table's ``spent_method`` becomes ``VARCHAR(64)``. Widening a ``VARCHAR`` on
PostgreSQL rewrites no row; the downgrade narrows it back, which fails while a longer name is
stored.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from app.db.migrate import refuse_populated_downgrade

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

_TABLES = ("dataset_total", "allocation", "dataset_block", "allocation_block")


def _width(old: int, new: int) -> None:
    for table in _TABLES:
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.alter_column(
                "spent_method",
                existing_type=sa.String(length=old),
                type_=sa.String(length=new),
                existing_nullable=False,
            )


def upgrade() -> None:
    _width(32, 64)


def downgrade() -> None:
    refuse_populated_downgrade()
    _width(64, 32)
