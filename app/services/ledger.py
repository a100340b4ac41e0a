"""Reading the ledger (cursor pagination), rejections, and verifying / rebuilding totals.

The ledger is the source of truth. ``verify`` recomputes every dataset's totals from its
entries (summing the stored entry curves in ledger order with the same round-up additions
the charge path used, so a consistent database matches bit for bit) and re-derives each
entry's curve from its stored mechanism to catch drift in the formulas or the order grid.
"""

from __future__ import annotations

import base64
import binascii
import math
from datetime import datetime
from typing import Any

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.accounting.curve import PrivacyCurve
from app.accounting.mechanisms import mechanism_from_dict
from app.db.engine import Database
from app.db.models import MAX_BIGINT, Dataset, DatasetTotal, LedgerEntry, Rejection, utcnow
from app.services import audit
from app.services.charges import entry_json
from app.services.curves import curve_of, iso, rdp_to_bytes, spend_of
from app.services.datasets import find_dataset
from app.services.errors import Unprocessable
from app.services.keys import SYSTEM, Principal


def encode_cursor(last_id: int) -> str:
    return base64.urlsafe_b64encode(f"v1:{last_id}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> int:
    """The row id a cursor continues before; 422 for anything not made by ``encode_cursor``
    (including positions outside 1..MAX_BIGINT, which no database could compare with)."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        version, value = raw.split(":", 1)
        if version != "v1" or not value.isascii() or not value.isdigit():
            raise ValueError(version)
        position = int(value)
        if not 1 <= position <= MAX_BIGINT:
            raise ValueError(value)
        return position
    except (ValueError, UnicodeDecodeError, binascii.Error):
        raise Unprocessable(f"invalid cursor {cursor!r}") from None


def list_entries(
    db: Database, principal: Principal, ref: str, *, limit: int, cursor: str | None = None
) -> dict[str, Any]:
    """Entries newest first; ``next_cursor`` continues after the last one returned."""
    before = decode_cursor(cursor) if cursor else None
    with db.read() as s:
        st = find_dataset(s, ref, principal)
        q = select(LedgerEntry).where(LedgerEntry.dataset_id == st.dataset.id)
        if before is not None:
            q = q.where(LedgerEntry.id < before)
        rows = s.scalars(q.order_by(LedgerEntry.id.desc()).limit(limit + 1)).all()
        more = len(rows) > limit
        rows = rows[:limit]
        return {
            "dataset_id": st.dataset.id,
            "entries": [entry_json(e) for e in rows],
            "next_cursor": encode_cursor(rows[-1].id) if more and rows else None,
            "total": st.totals.entry_count,
        }


def rejection_json(r: Rejection) -> dict[str, Any]:
    return {
        "id": r.id,
        "dataset_id": r.dataset_id,
        "created_at": iso(r.created_at),
        "operation": r.operation,
        "mechanism": r.mechanism,
        "label": r.label,
        "metadata": r.metadata_,
        "key_id": r.key_id,
        "reason": r.reason,
        "spent": r.spent,
        "requested": r.requested,
        "budget": r.budget,
    }


def list_rejections(
    db: Database,
    principal: Principal,
    *,
    dataset: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    limit: int = 100,
    cursor: str | None = None,
) -> dict[str, Any]:
    """Refused charges and reservations, newest first."""
    before = decode_cursor(cursor) if cursor else None
    with db.read() as s:
        q = select(Rejection)
        if dataset is not None:
            st = find_dataset(s, dataset, principal)
            q = q.where(Rejection.dataset_id == st.dataset.id)
        elif principal.dataset_ids is not None:
            q = q.where(Rejection.dataset_id.in_(principal.dataset_ids))
        if since is not None:
            q = q.where(Rejection.created_at >= since)
        if until is not None:
            q = q.where(Rejection.created_at <= until)
        if before is not None:
            q = q.where(Rejection.id < before)
        rows = s.scalars(q.order_by(Rejection.id.desc()).limit(limit + 1)).all()
        more = len(rows) > limit
        rows = rows[:limit]
        return {
            "rejections": [rejection_json(r) for r in rows],
            "next_cursor": encode_cursor(rows[-1].id) if more and rows else None,
        }


def _curve_mismatches(db: Database, dataset_id: str) -> list[int]:
    """Ids of entries whose stored curve no longer matches the curve of their mechanism (drift
    in the formulas or the order grid). Entries never change, so this runs outside the lock."""
    mismatched: list[int] = []
    with db.read() as s:
        rows = s.execute(
            select(LedgerEntry)
            .where(LedgerEntry.dataset_id == dataset_id)
            .order_by(LedgerEntry.seq)
        ).scalars()
        for e in rows:
            stored = curve_of(e)
            fresh = mechanism_from_dict(e.mechanism).curve()
            if not (
                math.isclose(fresh.rho, stored.rho, rel_tol=1e-12)
                and np.allclose(fresh.rdp, stored.rdp, rtol=1e-12, atol=0)
            ):
                mismatched.append(e.id)
    return mismatched


def _sum_ledger(s: Session, dataset_id: str) -> tuple[PrivacyCurve, int, dict[str, Any]]:
    """Sum of stored entry curves in ledger order, count and per-kind counts, read in the
    caller's transaction (which holds the dataset's lock, so the ledger cannot move)."""
    total = PrivacyCurve.zero()
    n = 0
    counts: dict[str, Any] = {}
    rows = s.execute(
        select(LedgerEntry).where(LedgerEntry.dataset_id == dataset_id).order_by(LedgerEntry.seq)
    ).scalars()
    for e in rows:
        total = total + curve_of(e)
        n += 1
        c = counts.setdefault(e.kind, {"entries": 0, "count": 0, "rho": 0.0})
        c["entries"] += 1
        c["count"] += e.count
        c["rho"] = c["rho"] + e.rho if c["rho"] is not None and math.isfinite(e.rho) else None
    return total, n, counts


def verify(db: Database, rebuild: bool = False, principal: Principal = SYSTEM) -> dict[str, Any]:
    """Recompute totals from the ledger for every dataset ``principal`` can see; report drift;
    optionally rebuild.

    Each dataset is read and (on request) rewritten in ONE write transaction that holds its
    lock, the lock every charge, reservation and budget change takes first: the sum is of the
    ledger as it stands, and no charge can slip in between reading it and writing the totals.
    """
    with db.read() as s:
        q = select(Dataset.id).order_by(Dataset.name)
        if principal.dataset_ids is not None:
            q = q.where(Dataset.id.in_(principal.dataset_ids))
        ids = list(s.scalars(q))
    report = []
    for dataset_id in ids:
        mismatched = _curve_mismatches(db, dataset_id)
        with db.write() as s:
            st = find_dataset(s, dataset_id, principal, lock=True)
            total, n, counts = _sum_ledger(s, dataset_id)
            stored = st.curve
            drift = {
                "rho": stored.rho != total.rho,
                "rdp": not np.array_equal(stored.rdp, total.rdp),
                "pure_eps": stored.pure_eps != total.pure_eps,
                "gaussian_only": stored.gaussian_only != total.gaussian_only,
                "entry_count": st.totals.entry_count != n,
            }
            drifted = [k for k, v in drift.items() if v]
            item: dict[str, Any] = {
                "dataset_id": dataset_id,
                "name": st.dataset.name,
                "entries": n,
                "ok": not drifted and not mismatched,
                "drift": drifted,
                "entries_with_curve_mismatch": mismatched,
            }
            if drifted:
                item["stored"] = {"rho": stored.rho, "entries": st.totals.entry_count}
                item["recomputed"] = {"rho": total.rho, "entries": n}
            if rebuild and drifted:
                t: DatasetTotal = st.totals
                sp = spend_of(st.dataset, total)
                t.rho, t.rdp, t.pure_eps = total.rho, rdp_to_bytes(total.rdp), total.pure_eps
                t.gaussian_only, t.entry_count, t.mechanism_counts = total.gaussian_only, n, counts
                t.spent_epsilon, t.spent_method, t.updated_at = sp.epsilon, sp.method, utcnow()
                audit.record(
                    s,
                    principal,
                    "totals.rebuilt",
                    dataset_id=dataset_id,
                    details={
                        "drift": drifted,
                        "recomputed": item["recomputed"],
                        "stored": item["stored"],
                    },
                )
                item["rebuilt"] = True
            report.append(item)
    return {"ok": all(r["ok"] for r in report), "datasets": report}


__all__ = [
    "decode_cursor",
    "encode_cursor",
    "list_entries",
    "list_rejections",
    "rejection_json",
    "verify",
]
