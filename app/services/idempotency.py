"""Idempotency-Key: a retried request with the same key answers what the first one answered.

A key names one request on one dataset, whatever the operation (``scope``: ``charge`` or
``reservation``): reusing it for another body, or for a reservation after a charge, is 422.
Records are written in the transaction that holds the dataset's lock, with the work they
describe, so concurrent retries wait for the first and replay it, and a retry after a crash
either finds the answer or finds that nothing was done.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.db.models import IdempotencyRecord, utcnow
from app.errors import BudgetExceeded, Unprocessable

_PROBLEM_KEYS = {"type", "title", "status", "detail"}
_T = IdempotencyRecord.__table__.c


def request_hash(payload: dict[str, Any]) -> str:
    """SHA-256 of the canonical JSON of a request body."""
    blob = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def replay(
    session: Session, dataset_id: str, scope: str, key: str, req_hash: str
) -> dict[str, Any] | None:
    """The first answer given to ``key`` (None if there was none); raises the stored problem
    when the first request was refused, 422 when the body differs."""
    rec = session.scalars(
        select(IdempotencyRecord).where(_T.dataset_id == dataset_id, _T.key == key)
    ).first()
    if rec is None:
        return None
    if rec.scope != scope or rec.request_hash != req_hash:
        raise Unprocessable(
            f"this Idempotency-Key was already used with a different request ({rec.scope})",
            idempotency_key=key,
        )
    if rec.status_code >= 400:
        raise BudgetExceeded(
            rec.response.get("detail", "over budget"),
            **{k: v for k, v in rec.response.items() if k not in _PROBLEM_KEYS},
        )
    return rec.response


def remember(
    session: Session,
    dataset_id: str,
    scope: str,
    key: str,
    req_hash: str,
    status_code: int,
    response: dict[str, Any],
) -> None:
    """Store the answer to ``key`` in the current transaction."""
    session.add(
        IdempotencyRecord(
            dataset_id=dataset_id,
            key=key,
            scope=scope,
            request_hash=req_hash,
            status_code=status_code,
            response=response,
            created_at=utcnow(),
        )
    )


__all__ = ["remember", "replay", "request_hash"]
