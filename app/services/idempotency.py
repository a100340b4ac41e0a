"""Idempotency-Key: a retried request with the same key answers what the first one answered.

A key names one request of one API key on one dataset, whatever the operation (``scope``:
``charge``, ``charge_dp_event`` or ``reservation``): reusing it for another body, or for a
reservation after a charge, is 422. Another API key sending the same value makes another request,
charged or refused on its own (as Stripe scopes keys to the account): two pipelines whose keys
collide (a job name and a date) must not share an answer, or the second release would never be
charged. Records are written in the transaction that holds the dataset's lock, with the work they
describe, so concurrent retries wait for the first and replay it, and a retry after a crash
either finds the answer or finds that nothing was done.

Records are kept for ever unless the operator sets a retention
(``PRIVACY_LEDGER_IDEMPOTENCY_RETENTION_DAYS``: the server's sweeper ``prune``s hourly) or runs
``privacy-ledger prune-idempotency``: a key retried after its record is gone is a new request.

A record made before migration 0009 (records per dataset only) whose API key could not be found
has no ``key_id``: any key presenting its value is refused (422) rather than answered another
key's answer or charged a second time.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from typing import Any, TypeVar

from pydantic import BaseModel
from sqlalchemy import delete, or_, select
from sqlalchemy.orm import Session

from app.db.engine import Database
from app.db.models import IdempotencyRecord, utcnow
from app.errors import BudgetExceeded, Unprocessable

_PROBLEM_KEYS = {"type", "title", "status", "detail"}
_T = IdempotencyRecord.__table__.c


def request_hash(payload: dict[str, Any]) -> str:
    """SHA-256 of the canonical JSON of a request body."""
    blob = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


SYSTEM_OWNER = "system"
"""The ``key_id`` of records made by the service acting on its own behalf (``SYSTEM``, no API
key); never an API key's id (those are ``key_<hex>``)."""


def owner(key_id: str | None) -> str:
    """Whose records a caller reads and writes: its API key's id (``SYSTEM_OWNER`` for none)."""
    return SYSTEM_OWNER if key_id is None else key_id


def replay(
    session: Session, dataset_id: str, scope: str, key: str, req_hash: str, key_id: str | None
) -> dict[str, Any] | None:
    """The first answer given to ``key`` sent by API key ``key_id`` (None if there was none);
    raises the stored problem when the first request was refused, 422 when the body differs
    (or when the only record of ``key`` predates per-key records and its key is unknown)."""
    mine = owner(key_id)
    found = session.scalars(
        select(IdempotencyRecord).where(
            _T.dataset_id == dataset_id,
            _T.key == key,
            or_(_T.key_id == mine, _T.key_id.is_(None)),
        )
    ).all()
    rec = next((r for r in found if r.key_id == mine), None)
    if rec is None:
        if found:  # made before records were per API key, by a key no record names
            raise Unprocessable(
                "this Idempotency-Key was used on this dataset before answers were kept per "
                "API key, and which key sent it is not known; send a new Idempotency-Key",
                idempotency_key=key,
            )
        return None
    if rec.scope != scope or rec.request_hash != req_hash:
        raise Unprocessable(
            "this Idempotency-Key was already used by this API key with a different request "
            f"({rec.scope})",
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
    key_id: str | None,
) -> None:
    """Store the answer to ``key`` sent by API key ``key_id`` in the current transaction."""
    session.add(
        IdempotencyRecord(
            dataset_id=dataset_id,
            key=key,
            key_id=owner(key_id),
            scope=scope,
            request_hash=req_hash,
            status_code=status_code,
            response=response,
            created_at=utcnow(),
        )
    )


PRUNE_BATCH = 5_000
"""Records deleted per transaction by ``prune`` (each transaction short: charges wait for none
of them, as no dataset's lock is taken)."""


def prune(db: Database, made_before: datetime) -> int:
    """Delete every record made before ``made_before``, ``PRUNE_BATCH`` per transaction, oldest
    first; how many. A retry of a deleted record's key is then a new request (charged again):
    what ``PRIVACY_LEDGER_IDEMPOTENCY_RETENTION_DAYS`` and ``privacy-ledger prune-idempotency``
    trade for a table that does not grow for ever. Replicas may prune at the same time: each
    deletes what is still there."""
    deleted = 0
    while True:
        with db.write() as s:
            ids = list(
                s.scalars(
                    select(_T.id)
                    .where(_T.created_at < made_before)
                    .order_by(_T.id)
                    .limit(PRUNE_BATCH)
                )
            )
            if ids:
                s.execute(delete(IdempotencyRecord).where(_T.id.in_(ids)))
        deleted += len(ids)
        if len(ids) < PRUNE_BATCH:
            return deleted


A = TypeVar("A", bound=BaseModel)


def replayed(model: type[A], first: dict[str, Any]) -> A:
    """The stored first answer ``first`` read back as ``model``, marked as a replay (the route
    answers it with ``Idempotent-Replayed: true``)."""
    answer = model.model_validate(first)
    answer._replayed = True  # type: ignore[attr-defined]
    return answer


__all__ = [
    "PRUNE_BATCH",
    "SYSTEM_OWNER",
    "owner",
    "prune",
    "remember",
    "replay",
    "replayed",
    "request_hash",
]
