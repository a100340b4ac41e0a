"""repair stored JSON holding lone UTF-16 surrogates (they made every page showing it fail)

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-24 09:30:00

Before request strings were checked, ``metadata`` could carry a lone surrogate (``"\\ud800"``):
stored, but never renderable again. Each one is replaced by U+FFFD, the Unicode replacement
character; nothing else changes (a valid surrogate pair decodes to one character and is kept).
Rows are found by the ``\\ud8..\\udf`` escape in their stored JSON text, so the scan costs one
indexed-free pass over these columns, once. The downgrade has nothing to undo.
"""

from __future__ import annotations

import re
from typing import Any

import sqlalchemy as sa
from alembic import op

from app.db.migrate import refuse_populated_downgrade

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

_SURROGATE = re.compile("[\ud800-\udfff]")
_JSON_COLUMNS = {
    "ledger_entry": ["metadata"],
    "rejection": ["metadata"],
    "reservation": ["metadata"],
    "idempotency_record": ["response"],
    "audit_event": ["details"],
}
_PRIMARY_KEYS = {"reservation": "id"}


def _scrub(value: Any) -> Any:
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {_scrub(k): _scrub(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_scrub(v) for v in value]
    return value


def upgrade() -> None:
    conn = op.get_bind()
    for name, columns in _JSON_COLUMNS.items():
        pk = _PRIMARY_KEYS.get(name, "id")
        table = sa.table(name, sa.column(pk), *(sa.column(c, sa.JSON) for c in columns))
        # a lone surrogate is stored as an escape: \ud800 .. \udfff (json.dumps, ensure_ascii)
        suspect = sa.or_(
            *(sa.cast(table.c[c], sa.Text).like("%\\ud%", escape="!") for c in columns)
        )
        for row in conn.execute(sa.select(table).where(suspect)).mappings().all():
            fixed = {c: _scrub(row[c]) for c in columns}
            if any(fixed[c] != row[c] for c in columns):
                conn.execute(table.update().where(table.c[pk] == row[pk]).values(**fixed))


def downgrade() -> None:
    refuse_populated_downgrade()
