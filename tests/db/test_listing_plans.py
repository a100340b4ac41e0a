"""Rejection and audit pages of one dataset read that page, not the whole table.

``GET /v1/rejections?dataset=`` and ``GET /v1/audit?dataset=`` page newest first by row id.
No index served that order within a dataset: the rejection index is ``(dataset_id,
created_at)`` and the audit one ``(dataset_id)``, so PostgreSQL fetched every row of the dataset
and sorted them, or scanned the primary key backwards filtering out every newer row of the
other datasets, and SQLite sorted the rejections of the dataset in a temporary B-tree, for each
page. The ``(dataset_id, id)`` indexes serve the filter and the order (as the ``(dataset_id,
seq)`` index serves ledger pages, c4a3e8b). Counted in the query plan, not timed."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import create_engine, event, text

from app.db.models import AuditEvent, Rejection
from tests.conftest import new_dataset

T0 = datetime(2026, 1, 1, tzinfo=UTC)
PER_DATASET = 1_500
PAGE = 50


def _fill(url: str, dataset_ids: list[str]) -> None:
    """PER_DATASET rejections and audit events of each dataset, interleaved (the first dataset's
    are the oldest rows of both tables: the costliest to reach by the primary key)."""
    rejections, events = [], []
    for k, dataset_id in enumerate(dataset_ids):
        for i in range(PER_DATASET):
            at = T0 + timedelta(seconds=k * PER_DATASET + i)
            rejections.append(
                {
                    "dataset_id": dataset_id,
                    "created_at": at,
                    "operation": "charge",
                    "mechanism": {"mechanism": "laplace", "epsilon": 50.0},
                    "label": None,
                    "metadata_": None,
                    "key_id": None,
                    "reason": "over budget",
                    "spent": {"epsilon": 1.0},
                    "requested": {"epsilon": 50.0},
                    "budget": {"epsilon": 1.0, "delta": 1e-6},
                }
            )
            events.append(
                {
                    "created_at": at,
                    "key_id": None,
                    "action": "dataset.updated",
                    "dataset_id": dataset_id,
                    "target_id": None,
                    "details": {"i": i},
                }
            )
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(Rejection.__table__.insert(), rejections)
            conn.execute(AuditEvent.__table__.insert(), events)
    finally:
        engine.dispose()


def _rows_read(node: dict[str, Any], table: str) -> int:
    """Rows a PostgreSQL plan node (and its children) fetched from ``table``: those it returned
    and those its filter dropped."""
    own = 0
    if node.get("Relation Name") == table:
        own = node["Actual Rows"] + node.get("Rows Removed by Filter", 0)
    return own + sum(_rows_read(n, table) for n in node.get("Plans", []))


def _check_plans(db_url: str, seen: list[tuple[str, Any]], table: str) -> None:
    engine = create_engine(db_url)
    try:
        with engine.connect() as conn:
            if engine.dialect.name != "sqlite":
                conn.execute(text(f"ANALYZE {table}"))
            for statement, parameters in seen:
                if engine.dialect.name == "sqlite":
                    plan = conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, parameters)
                    steps = " / ".join(str(row[-1]) for row in plan)
                    assert "TEMP B-TREE" not in steps, steps
                    assert f"SCAN {table}" not in steps, steps  # a search through an index
                else:
                    (plan,) = conn.exec_driver_sql(
                        "EXPLAIN (ANALYZE, FORMAT JSON) " + statement, parameters
                    ).scalar_one()
                    assert _rows_read(plan["Plan"], table) <= PAGE + 1, json.dumps(plan)
    finally:
        engine.dispose()


def _captured(client: TestClient, table: str, *urls: str) -> tuple[list[Any], list[Any]]:
    db = client.app.state.db  # type: ignore[attr-defined]
    seen: list[tuple[str, Any]] = []

    def capture(conn, cursor, statement, parameters, context, executemany):  # type: ignore[no-untyped-def]
        if f"FROM {table}" in statement and "ORDER BY" in statement:
            seen.append((statement, parameters))

    pages = []
    event.listen(db.read_engine, "before_cursor_execute", capture)
    try:
        for url in urls:
            r = client.get(url)
            assert r.status_code == 200, r.text
            pages.append(r.json())
    finally:
        event.remove(db.read_engine, "before_cursor_execute", capture)
    return pages, seen


def test_a_dataset_rejection_page_reads_its_rows(client: TestClient, db_url: str) -> None:
    datasets = [new_dataset(client, f"d{k}")["id"] for k in range(3)]
    _fill(db_url, datasets)
    url = f"/v1/rejections?dataset={datasets[0]}&limit={PAGE}"
    (first,), seen = _captured(client, "rejection", url)
    (second,), more = _captured(client, "rejection", f"{url}&cursor={first['next_cursor']}")
    rows = first["rejections"] + second["rejections"]
    assert len(rows) == 2 * PAGE and {x["dataset_id"] for x in rows} == {datasets[0]}
    ids = [x["id"] for x in rows]
    assert ids == sorted(ids, reverse=True) and len(set(ids)) == len(ids)
    assert len(seen + more) == 2
    _check_plans(db_url, seen + more, "rejection")


def test_a_dataset_audit_page_reads_its_rows(client: TestClient, db_url: str) -> None:
    datasets = [new_dataset(client, f"d{k}")["id"] for k in range(3)]
    _fill(db_url, datasets)
    url = f"/v1/audit?dataset={datasets[0]}&limit={PAGE}"
    (first,), seen = _captured(client, "audit_event", url)
    last = first["events"][-1]["id"]
    (second,), more = _captured(client, "audit_event", f"{url}&before_id={last}")
    rows = first["events"] + second["events"]
    assert len(rows) == 2 * PAGE and {x["dataset_id"] for x in rows} == {datasets[0]}
    ids = [x["id"] for x in rows]
    assert ids == sorted(ids, reverse=True) and len(set(ids)) == len(ids)
    assert len(seen + more) == 2
    _check_plans(db_url, seen + more, "audit_event")
