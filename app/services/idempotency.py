"""Idempotency-Key: a retried request with the same key answers what the first one answered.

Records are per dataset and per operation (``charge`` or ``reservation``), written in the same
transaction as the work they describe, so a retry after a crash either finds the answer or
finds nothing was done. The same key with a different body is refused (422).
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
        select(IdempotencyRecord).where(
            _T.dataset_id == dataset_id, _T.key == key, _T.scope == scope
        )
    ).first()
    if rec is None:
        return None
    if rec.request_hash != req_hash:
        raise Unprocessable(
            "this Idempotency-Key was already used with a different request body",
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
