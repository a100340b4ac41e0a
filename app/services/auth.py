"""Authentication: the principal behind a presented API key, checked in the worker thread of the
work it guards (one thread hop per request), before that work opens its transaction.

Keys are found by their slow salted lookup digest (``key_digest``: one scrypt per key and
process, then a dictionary lookup and one indexed query; a key this process has not seen waits
for a scrypt slot in a short bounded queue, or is refused at once with 503 when that queue is
full, so that a flood of random keys never holds more than a few worker threads). A row stored
the old way (unsalted SHA-256 lookup) is verified with its salted hash and rewritten to the
scrypt digest on its first successful use, in a short write transaction of its own.

A key found active is remembered for ``KEY_CACHE_SECONDS`` per ``Database`` (process): the
requests that follow within that window skip the key's query (a charge then costs one round
trip less; a budget read is one SELECT). Revoking a key through this process forgets every
remembered key at once; another process (worker, replica, the CLI) keeps accepting a key it
found active for at most that window after it is revoked (docs/operations.md). Unknown and
revoked keys are never remembered.

A request authenticated before a revocation may still be waiting for a lock when it commits.
Every write therefore confirms its key inside its own transaction once its locks are held
(``confirm_active``): key changes and dataset creation always; writes under a dataset's lock
(``confirm_if_revoked``) only when the installation's last revocation (``KEYS_REVOKED_AT``, read
under that lock) is within ``REVOCATION_SKEW`` of the time the key was read, so that the steady
charge path reads no key row.
"""

from __future__ import annotations

import threading
import time
import weakref
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, bindparam, select
from sqlalchemy.orm import Session

from app.db.engine import Database, core
from app.db.models import ApiKey, utcnow
from app.errors import Forbidden, Unauthorized
from app.principal import Caller, Principal, Role
from app.services import key_digest

_K = ApiKey.__table__.c
# built once: the steady-state path of every request
_BY_DIGEST = select(_K.id, _K.role, _K.dataset_ids, _K.revoked_at, _K.allocations, _K.label).where(
    _K.lookup == bindparam("digest")
)
_REVOKED_AT_BY_ID = select(_K.revoked_at).where(_K.id == bindparam("id"))

KEYS_REVOKED_AT = "keys_revoked_at"
"""``app_setting`` row: when a key was last revoked (UTC, ISO 8601), written by every revocation
in its transaction (``app.services.keys``)."""
REVOCATION_SKEW = timedelta(minutes=5)
"""How far apart the clocks of two replicas may be: a write re-reads its key when the last
revocation is no more than this before the key was read."""


KEY_CACHE_SECONDS = 2.0
"""How long a process trusts a key it found active without looking it up again."""
KEY_CACHE_SIZE = 4096
_now = time.monotonic  # the window's clock (tests substitute a fixed one)


class _RecentKeys:
    """Active keys' rows by lookup digest, each trusted until its deadline."""

    def __init__(self) -> None:
        self._rows: dict[str, tuple[float, Any, datetime]] = {}
        self._lock = threading.Lock()
        self.generation = 0  # bumped by ``forget``: a lookup begun before it is not stored

    def get(self, digest: str) -> tuple[Any, datetime] | None:
        """The row remembered for ``digest`` and when it was read, while it is trusted."""
        found = self._rows.get(digest)
        if found is None or found[0] < _now():
            return None
        return found[1], found[2]

    def put(self, digest: str, row: Any, read_at: datetime, generation: int) -> None:
        with self._lock:
            if generation != self.generation:
                return
            if len(self._rows) >= KEY_CACHE_SIZE:
                self._rows.clear()
            self._rows[digest] = (_now() + KEY_CACHE_SECONDS, row, read_at)

    def forget(self) -> None:
        with self._lock:
            self.generation += 1
            self._rows.clear()


_recent: weakref.WeakKeyDictionary[Database, _RecentKeys] = weakref.WeakKeyDictionary()
_recent_lock = threading.Lock()


def _recent_keys(db: Database) -> _RecentKeys:
    found = _recent.get(db)
    if found is None:
        with _recent_lock:
            found = _recent.setdefault(db, _RecentKeys())
    return found


def forget_keys(db: Database) -> None:
    """Forget the keys this process remembers for ``db`` (after a key is revoked)."""
    _recent_keys(db).forget()


def find_key(db: Database, key: str) -> ApiKey | None:
    """The row of ``key``: by its scrypt digest, or a legacy row by its SHA-256 lookup (verified
    with its salted hash, then upgraded to the scrypt digest: once per legacy key)."""
    digester = key_digest.digester(db)
    digest = digester.digest(key)
    with db.read() as s:
        row = s.scalars(select(ApiKey).where(_K.lookup == digest)).first()
        if row is None:  # unknown, or stored the old way: one more indexed query
            legacy = key_digest.legacy_lookup(key)
            row = s.scalars(select(ApiKey).where(_K.lookup == legacy)).first()
    if row is None:
        return None
    if key_digest.is_legacy(row):
        if not key_digest.legacy_verifies(row, key):
            return None
        with db.write() as s:
            stored = s.get(ApiKey, row.id)
            if stored is not None and key_digest.is_legacy(stored):
                stored.lookup, stored.salt, stored.key_hash = digest, None, None
        row.lookup, row.salt, row.key_hash = digest, None, None
    digester.known(key, digest)
    return row


def require_role(principal: Principal, role: Role) -> None:
    """``Forbidden`` unless the principal's role is at least ``role``."""
    if not principal.has_role(role):
        raise Forbidden(
            f"this endpoint needs the {role.value!r} role; the key has {principal.role.value!r}"
        )


def _steady(db: Database, session: Session | Connection | None, key: str) -> tuple[Any, datetime]:
    """The key's row by its scrypt digest: remembered (an active key, found less than
    ``KEY_CACHE_SECONDS`` ago), or one prebuilt indexed query, in ``session`` if given; with the
    time the row was read (taken before the query)."""
    digester = key_digest.digester(db)
    digest = digester.digest(key)  # ServerBusy when the KDF queue is full (an unseen key)
    recent = _recent_keys(db)
    found = recent.get(digest)
    if found is not None:
        return found
    generation = recent.generation
    read_at = utcnow()
    params = {"digest": digest}
    if session is not None:
        row = core(session).execute(_BY_DIGEST, params).first()
    else:
        with db.read() as s:
            row = s.connection().execute(_BY_DIGEST, params).first()
    if row is not None:
        digester.known(key, digest)  # a flood of unknown keys never evicts its digest
        if row.revoked_at is None:
            recent.put(digest, row, read_at, generation)
    return row, read_at


def authenticated(
    db: Database, caller: Caller, session: Session | Connection | None = None
) -> Principal:
    """The principal for the caller's key (401 missing, unknown or revoked; 403 role too low;
    503 ``ServerBusy`` when the key's digest is not remembered and the KDF queue is full).

    A ``Principal`` (the service itself, a CLI command on the server) is trusted as given. The
    lookup runs in ``session`` (a Session or a ``read_core`` connection) when the caller reads
    in one (one read per request), else in a read of its own. Never call it inside a write
    transaction: a key stored the old way is upgraded once, in a write of its own.
    """
    if isinstance(caller, Principal):
        return caller
    if not caller.token:
        raise Unauthorized("an API key is required: send 'Authorization: Bearer <key>'")
    row, read_at = _steady(db, session, caller.token)  # a Row of the key's columns, or None
    if row is None:  # unknown, or a legacy row (upgraded on this first use)
        read_at = utcnow()
        row = find_key(db, caller.token)
    if row is None:
        raise Unauthorized("unknown API key")
    if row.revoked_at is not None:
        raise Unauthorized("this API key has been revoked")
    ids = tuple(row.dataset_ids) if row.dataset_ids is not None else None
    limited = tuple(row.allocations) if row.allocations is not None else None
    principal = Principal(
        key_id=row.id,
        role=Role(row.role),
        dataset_ids=ids,
        allocations=limited,
        key_name=row.label,
        checked_at=read_at,
    )
    require_role(principal, caller.role)
    return principal


def may_be_revoked(principal: Principal, keys_revoked_at: str | None) -> bool:
    """Whether a key revocation (the last one at ``keys_revoked_at``, the ``KEYS_REVOKED_AT``
    setting) may have committed after ``principal``'s key was read, give or take
    ``REVOCATION_SKEW`` of clock difference between replicas. Principals trusted as given
    (``checked_at`` None: SYSTEM, CLI commands on the server) never are."""
    if principal.checked_at is None or not keys_revoked_at:
        return False
    return datetime.fromisoformat(keys_revoked_at) >= principal.checked_at - REVOCATION_SKEW


def confirm_active(session: Session | Connection, principal: Principal) -> None:
    """401 when ``principal``'s key is no longer active: read in the caller's write transaction
    once its locks are held, so that a request authenticated before a revocation, and still
    waiting for a lock when the revocation committed, writes nothing. Principals trusted as
    given are not looked up."""
    if principal.checked_at is None or principal.key_id is None:
        return
    row = core(session).execute(_REVOKED_AT_BY_ID, {"id": principal.key_id}).first()
    if row is None or row.revoked_at is not None:
        raise Unauthorized(
            "this API key was revoked while the request waited for its turn; nothing was done"
        )


def confirm_if_revoked(
    session: Session | Connection, principal: Principal, keys_revoked_at: str | None
) -> None:
    """``confirm_active`` when ``may_be_revoked``: what a write under a dataset's lock does,
    ``keys_revoked_at`` read under that lock."""
    if may_be_revoked(principal, keys_revoked_at):
        confirm_active(session, principal)


__all__ = [
    "KEYS_REVOKED_AT",
    "KEY_CACHE_SECONDS",
    "REVOCATION_SKEW",
    "authenticated",
    "confirm_active",
    "confirm_if_revoked",
    "find_key",
    "forget_keys",
    "may_be_revoked",
    "require_role",
]
