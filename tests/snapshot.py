"""Everything a request could change, read straight from the database, for "a 4xx changes
nothing" checks: ledger, totals, datasets, rejections, reservations, idempotency records, audit
trail and keys (every table of the schema), each in primary-key order."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, create_engine, select

from app.db.models import Base

Snapshot = dict[str, list[tuple[Any, ...]]]


def take(engine: Engine) -> Snapshot:
    """Every row of every table (the schema's tables, so a new table is covered too)."""
    out: Snapshot = {}
    with engine.connect() as conn:
        for table in Base.metadata.sorted_tables:
            pk = list(table.primary_key.columns)
            out[table.name] = [tuple(row) for row in conn.execute(select(table).order_by(*pk))]
    return out


def changed_tables(before: Snapshot, after: Snapshot) -> list[str]:
    return [name for name in before if before[name] != after.get(name)]


class Watcher:
    """``take()`` on one engine for the life of a test."""

    def __init__(self, url: str) -> None:
        self.engine = create_engine(url)

    def take(self) -> Snapshot:
        return take(self.engine)

    def close(self) -> None:
        self.engine.dispose()


__all__ = ["Snapshot", "Watcher", "changed_tables", "take"]
