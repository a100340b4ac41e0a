"""Authentication: the principal behind a presented API key, checked inside the transaction of
the work it guards (one worker thread and one transaction per request).

Keys are found by ``lookup`` = SHA-256 of the key and verified against ``key_hash`` =
SHA-256(salt || key) with ``hmac.compare_digest`` (see ``keys`` for how they are made).
"""

from __future__ import annotations

import hashlib
import hmac

from sqlalchemy import bindparam, select
from sqlalchemy.orm import Session

from app.db.engine import Database
from app.db.models import ApiKey
from app.errors import Forbidden, Unauthorized
from app.principal import Caller, Principal, Role

_K = ApiKey.__table__.c
_BY_LOOKUP = select(_K.id, _K.salt, _K.key_hash, _K.role, _K.dataset_ids, _K.revoked_at).where(
    _K.lookup == bindparam("lookup")
)


def lookup_digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def key_digest(salt: str, key: str) -> str:
    return hashlib.sha256((salt + key).encode()).hexdigest()


def require_role(principal: Principal, role: Role) -> None:
    """``Forbidden`` unless the principal's role is at least ``role``."""
    if not principal.has_role(role):
        raise Forbidden(
            f"this endpoint needs the {role.value!r} role; the key has {principal.role.value!r}"
        )


def authenticated(db: Database, caller: Caller) -> Principal:
    """``authenticate`` in a read transaction of its own (for work that runs in a group
    transaction, where another thread holds the lock)."""
    if isinstance(caller, Principal):
        return caller
    with db.read() as s:
        return authenticate(s, caller)


def authenticate(session: Session, caller: Caller) -> Principal:
    """The principal for the caller's key (401 unknown or revoked, 403 role too low).

    A ``Principal`` (the service itself, a CLI command on the server) is trusted as given.
    """
    if isinstance(caller, Principal):
        return caller
    if not caller.token:
        raise Unauthorized("an API key is required: send 'Authorization: Bearer <key>'")
    row = session.connection().execute(_BY_LOOKUP, {"lookup": lookup_digest(caller.token)}).first()
    if row is None or not hmac.compare_digest(row.key_hash, key_digest(row.salt, caller.token)):
        raise Unauthorized("unknown API key")
    if row.revoked_at is not None:
        raise Unauthorized("this API key has been revoked")
    ids = tuple(row.dataset_ids) if row.dataset_ids is not None else None
    principal = Principal(key_id=row.id, role=Role(row.role), dataset_ids=ids)
    require_role(principal, caller.role)
    return principal


__all__ = ["authenticate", "authenticated", "key_digest", "lookup_digest", "require_role"]
