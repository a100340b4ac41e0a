"""idempotency records per API key: ``idempotency_record.key_id``, unique (dataset, key, key_id)

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-27

An ``Idempotency-Key`` used to name one request per dataset, whoever sent it: a second pipeline
(another API key) sending the same value and body was answered the first pipeline's answer, and
its own release was never charged. Records now belong to the API key that made them
(``app.services.idempotency``), so the unique constraint becomes (dataset_id, key, key_id).

Each existing record gets the key that made it, from what its answer points at:

* an admitted charge (``charge``, ``charge_dp_event``): its ledger entries' ``key_id``;
* a reservation made: the reservation's ``key_id``;
* a refusal (409): the rejection written in the same transaction, the dataset's latest one of
  that operation at or before the record's time, if its ``spent`` and ``requested`` are those
  of the stored answer;

falling back to the ``key_id`` the stored answer itself shows. An entry made by the service
itself (no API key) gets ``SYSTEM_OWNER``. A record whose key is found nowhere keeps
``key_id`` NULL: then any key presenting its value is refused (422) instead of being answered
another key's answer or charged twice.

The downgrade keeps, of the records that now share a (dataset, key), the first one made (the
others' keys would be answered its answer again, as before this revision); it is refused while
the ledger has entries, as every downgrade, unless forced.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

from app.db.migrate import refuse_populated_downgrade

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

SYSTEM_OWNER = "system"  # app.services.idempotency.SYSTEM_OWNER when this revision was written
_BATCH = 1000

_records = sa.table(
    "idempotency_record",
    sa.column("id"),
    sa.column("dataset_id"),
    sa.column("key"),
    sa.column("key_id"),
    sa.column("scope"),
    sa.column("status_code"),
    sa.column("response", sa.JSON),
    sa.column("created_at"),  # untyped: compared with the rejections' as stored
)
_entries = sa.table("ledger_entry", sa.column("id"), sa.column("dataset_id"), sa.column("key_id"))
_reservations = sa.table(
    "reservation", sa.column("id"), sa.column("dataset_id"), sa.column("key_id")
)
_rejections = sa.table(
    "rejection",
    sa.column("id"),
    sa.column("dataset_id"),
    sa.column("operation"),
    sa.column("key_id"),
    sa.column("created_at"),
    sa.column("spent", sa.JSON),
    sa.column("requested", sa.JSON),
)


def upgrade() -> None:
    with op.batch_alter_table("idempotency_record", schema=None) as batch_op:
        batch_op.add_column(sa.Column("key_id", sa.String(length=32), nullable=True))
        batch_op.drop_constraint("uq_idempotency_record_dataset_key", type_="unique")
        batch_op.create_unique_constraint(
            "uq_idempotency_record_dataset_key_key_id", ["dataset_id", "key", "key_id"]
        )
    conn = op.get_bind()
    last = None
    while True:
        page = sa.select(_records).order_by(_records.c.id).limit(_BATCH)
        if last is not None:
            page = page.where(_records.c.id > last)
        rows = conn.execute(page).mappings().all()
        if not rows:
            break
        last = rows[-1]["id"]
        found = _made_by(conn, rows)
        if found:
            conn.execute(
                _records.update()
                .where(_records.c.id == sa.bindparam("rid"))
                .values(key_id=sa.bindparam("kid")),
                [{"rid": rid, "kid": kid} for rid, kid in found.items()],
            )


def _owner(key_id: Any) -> str:
    return SYSTEM_OWNER if key_id is None else str(key_id)


def _one(key_ids: Iterable[Any]) -> str | None:
    """The one owner of these key ids (None when there are none or they differ)."""
    owners = {_owner(k) for k in key_ids}
    return owners.pop() if len(owners) == 1 else None


def _shown(response: Any, scope: str) -> str | None:
    """The key id an admitted answer itself shows (None when it has none)."""
    try:
        if scope == "reservation":
            return _owner(response["key_id"])
        entries = [response["entry"]] if "entry" in response else response["entries"]
        return _one(e["key_id"] for e in entries)
    except (KeyError, TypeError):
        return None


def _answered_ids(response: Any, scope: str) -> list[Any]:
    """The ledger entry ids (charges) or reservation id an admitted answer names (empty when it
    names none of the right type)."""
    try:
        if scope == "reservation":
            ids = [response["id"]]
            return ids if all(isinstance(i, str) for i in ids) else []
        entries = [response["entry"]] if "entry" in response else response["entries"]
        ids = [e["id"] for e in entries]
    except (KeyError, TypeError):
        return []
    return ids if all(isinstance(i, int) and not isinstance(i, bool) for i in ids) else []


def _key_ids(conn: sa.Connection, table: sa.TableClause, ids: set[Any]) -> dict[Any, Any]:
    """(id -> (dataset_id, key_id)) of the rows of ``table`` with these ids."""
    if not ids:
        return {}
    rows = conn.execute(
        sa.select(table.c.id, table.c.dataset_id, table.c.key_id).where(table.c.id.in_(ids))
    )
    return {r.id: (r.dataset_id, r.key_id) for r in rows}


def _refused_by(conn: sa.Connection, rec: Any) -> str | None:
    """The key of the rejection a stored refusal answered (None when none matches)."""
    operation = "reservation" if rec["scope"] == "reservation" else "charge"
    rejection = (
        conn.execute(
            sa.select(_rejections)
            .where(
                _rejections.c.dataset_id == rec["dataset_id"],
                _rejections.c.operation == operation,
                _rejections.c.created_at <= rec["created_at"],
            )
            .order_by(_rejections.c.created_at.desc(), _rejections.c.id.desc())
            .limit(1)
        )
        .mappings()
        .first()
    )
    response = rec["response"]
    if (
        rejection is None
        or not isinstance(response, dict)
        or rejection["spent"] != response.get("spent")
        or rejection["requested"] != response.get("requested")
    ):
        return None
    return _owner(rejection["key_id"])


def _made_by(conn: sa.Connection, rows: Sequence[Any]) -> dict[Any, str]:
    """(record id -> key id) for the records of ``rows`` whose key is found."""
    admitted = [r for r in rows if r["status_code"] < 400]
    charged = {
        i
        for r in admitted
        if r["scope"] != "reservation"
        for i in _answered_ids(r["response"], r["scope"])
    }
    held = {
        i
        for r in admitted
        if r["scope"] == "reservation"
        for i in _answered_ids(r["response"], r["scope"])
    }
    entries, reservations = _key_ids(conn, _entries, charged), _key_ids(conn, _reservations, held)
    found: dict[Any, str] = {}
    for r in rows:
        kid: str | None
        if r["status_code"] >= 400:
            kid = _refused_by(conn, r)
        else:
            table = reservations if r["scope"] == "reservation" else entries
            named = [table.get(i) for i in _answered_ids(r["response"], r["scope"])]
            ours = [n[1] for n in named if n is not None and n[0] == r["dataset_id"]]
            kid = _one(ours) if named and len(ours) == len(named) else None
            if kid is None:
                kid = _shown(r["response"], r["scope"])
        if kid is not None:
            found[r["id"]] = kid
    return found


def downgrade() -> None:
    refuse_populated_downgrade()  # the records of other keys sharing a value would be lost
    first = sa.select(sa.func.min(_records.c.id)).group_by(_records.c.dataset_id, _records.c.key)
    op.get_bind().execute(_records.delete().where(_records.c.id.not_in(first)))
    with op.batch_alter_table("idempotency_record", schema=None) as batch_op:
        batch_op.drop_constraint("uq_idempotency_record_dataset_key_key_id", type_="unique")
        batch_op.create_unique_constraint(
            "uq_idempotency_record_dataset_key", ["dataset_id", "key"]
        )
        batch_op.drop_column("key_id")
