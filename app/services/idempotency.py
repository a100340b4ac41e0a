"""Idempotency-Key records: the first answer to a request, replayed to its retries.

A key names one request on one dataset, whatever the operation: reusing it for another body,
or for a reservation after a charge, is 422. Callers look a key up and record the answer
inside the transaction that holds the dataset's lock, so concurrent retries wait for the first
and then replay it. (The charge path keeps its own copy of this logic in ``charges._replay``;
``scope`` is what tells the two operations apart.)
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.db.models import IdempotencyRecord, utcnow
from app.services.errors import BudgetExceeded, Unprocessable

_PROBLEM_KEYS = {"type", "title", "status", "detail"}


def replay(
    session: Session, dataset_id: str, scope: str, key: str, req_hash: str
) -> tuple[int, dict[str, Any]] | None:
    """The recorded answer for ``key`` (a 409 is raised again), or None when it is new."""
    rec = session.scalars(
        select(IdempotencyRecord).where(
            IdempotencyRecord.dataset_id == dataset_id, IdempotencyRecord.key == key
        )
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
    return rec.status_code, rec.response


def remember(
    session: Session,
    dataset_id: str,
    scope: str,
    key: str,
    req_hash: str,
    status: int,
    body: dict[str, Any],
) -> None:
    """Record the first answer to ``key`` in the caller's transaction."""
    session.add(
        IdempotencyRecord(
            dataset_id=dataset_id,
            key=key,
            scope=scope,
            request_hash=req_hash,
            status_code=status,
            response=body,
            created_at=utcnow(),
        )
    )


__all__ = ["remember", "replay"]
