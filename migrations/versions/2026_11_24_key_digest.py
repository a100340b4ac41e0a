"""api keys: no stored prefix; scrypt lookup digests (legacy salt and hash nullable)

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-24 09:00:00

Keys are found by a slow salted digest (``app.services.key_digest``); ``prefix`` (the key's
first 8 characters) is dropped, and ``salt`` / ``key_hash`` stay only for rows written before,
until their first use rewrites them. Downgrading leaves keys written or used since unusable by
the older code (their SHA-256 lookup is gone): issue new ones after a downgrade.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from app.db.migrate import refuse_populated_downgrade

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("api_key", schema=None) as batch_op:
        batch_op.drop_column("prefix")
        batch_op.alter_column("salt", existing_type=sa.String(length=64), nullable=True)
        batch_op.alter_column("key_hash", existing_type=sa.String(length=128), nullable=True)


def downgrade() -> None:
    refuse_populated_downgrade()
    op.execute("UPDATE api_key SET salt = '' WHERE salt IS NULL")
    op.execute("UPDATE api_key SET key_hash = '' WHERE key_hash IS NULL")
    with op.batch_alter_table("api_key", schema=None) as batch_op:
        batch_op.add_column(sa.Column("prefix", sa.String(length=32), nullable=True))
    op.execute("UPDATE api_key SET prefix = ''")
    with op.batch_alter_table("api_key", schema=None) as batch_op:
        batch_op.alter_column("prefix", existing_type=sa.String(length=32), nullable=False)
        batch_op.alter_column("salt", existing_type=sa.String(length=64), nullable=False)
        batch_op.alter_column("key_hash", existing_type=sa.String(length=128), nullable=False)
