"""Authentication: the principal behind a presented API key, checked in the worker thread of the
work it guards (one thread hop per request), before that work opens its transaction.

Keys are found by their slow salted lookup digest (``key_digest``: one scrypt per key and
process, then a dictionary lookup and one indexed query). A row stored the old way (unsalted
SHA-256 lookup) is verified with its salted hash and rewritten to the scrypt digest on its first
successful use, in a short write transaction of its own.
"""

from __future__ import annotations

from sqlalchemy import select

from app.db.engine import Database
from app.db.models import ApiKey
from app.errors import Forbidden, Unauthorized
from app.principal import Caller, Principal, Role
from app.services import key_digest

_K = ApiKey.__table__.c


def find_key(db: Database, key: str) -> ApiKey | None:
    """The row of ``key``: by its scrypt digest, or a legacy row by its SHA-256 lookup (verified
    with its salted hash, then upgraded to the scrypt digest: once per legacy key)."""
    digest = key_digest.digester(db).digest(key)
    with db.read() as s:
        row = s.scalars(select(ApiKey).where(_K.lookup == digest)).first()
        if row is None:  # unknown, or stored the old way: one more indexed query
            legacy = key_digest.legacy_lookup(key)
            row = s.scalars(select(ApiKey).where(_K.lookup == legacy)).first()
    if row is None or not key_digest.is_legacy(row):
        return row
    if not key_digest.legacy_verifies(row, key):
        return None
    with db.write() as s:
        stored = s.get(ApiKey, row.id)
        if stored is not None and key_digest.is_legacy(stored):
            stored.lookup, stored.salt, stored.key_hash = digest, None, None
    row.lookup, row.salt, row.key_hash = digest, None, None
    return row


def require_role(principal: Principal, role: Role) -> None:
    """``Forbidden`` unless the principal's role is at least ``role``."""
    if not principal.has_role(role):
        raise Forbidden(
            f"this endpoint needs the {role.value!r} role; the key has {principal.role.value!r}"
        )


def authenticated(db: Database, caller: Caller) -> Principal:
    """The principal for the caller's key (401 missing, unknown or revoked; 403 role too low).

    A ``Principal`` (the service itself, a CLI command on the server) is trusted as given.
    Call it before opening the transaction of the work it guards (it may write once, to
    upgrade a legacy key row).
    """
    if isinstance(caller, Principal):
        return caller
    if not caller.token:
        raise Unauthorized("an API key is required: send 'Authorization: Bearer <key>'")
    row = find_key(db, caller.token)
    if row is None:
        raise Unauthorized("unknown API key")
    if row.revoked_at is not None:
        raise Unauthorized("this API key has been revoked")
    ids = tuple(row.dataset_ids) if row.dataset_ids is not None else None
    principal = Principal(key_id=row.id, role=Role(row.role), dataset_ids=ids)
    require_role(principal, caller.role)
    return principal


__all__ = ["authenticated", "find_key", "require_role"]
