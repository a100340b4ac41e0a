"""How API keys are stored: a slow, salted digest that a database dump cannot cheaply guess.

A key is found by its *lookup digest*, ``"s1$" + base64url(scrypt(key, salt, N=2**14, r=8,
p=1, 32 bytes))`` [RFC 7914], where ``salt`` is 16 random bytes made once per installation
(``app_setting`` row ``key_digest_salt``; deleting it invalidates every key). The digest is
deterministic, so one indexed query finds the row; it is also the only thing stored. Each guess
against a dump costs one scrypt (about 16 MiB and tens of milliseconds), instead of one SHA-256:
generated keys (256 random bits) were never guessable, and this keeps a weak-ish operator key
(``PRIVACY_LEDGER_ADMIN_KEY``, at least 32 characters) out of reach as well.

Authentication is on every request's path, so each process remembers the digests it computed,
keyed by a BLAKE2b MAC of the key under a per-process random key (the key itself is not kept):
a key costs one scrypt per process, then a dictionary lookup. Two bounded LRUs keep them: the
digests of *known* keys (a row was found for them, or they were minted here) and, apart, those
of the other keys presented lately, so that a flood of random keys only ever evicts its own
kind and a known key stays one dictionary lookup away (a key presented again and again with no
row, say a pipeline with a mistyped key, is also one lookup: its digest, not a verdict, is
kept, so a key created later is found).

A digest not remembered is computed by one scrypt at a time per process
(``MAX_CONCURRENT_KDF``: at most one core, however many keys are presented), with at most
``MAX_KDF_WAITING`` more presented keys waiting for the slot. Each computation runs in the
request's worker thread, and the worker pool is shared by every request (every route is a sync
``def``), so a presented key that finds the slot and the queue taken is refused at once with
``ServerBusy`` (503 with ``Retry-After``) rather than wait: a flood of unknown keys holds at
most ``MAX_CONCURRENT_KDF + MAX_KDF_WAITING`` threads, the other requests keep the rest of the
pool, and a request whose key is remembered never waits for the slot. Keys being minted
(``mint``) are never refused: only an admin (or the server itself, at start-up) mints, and it
waits for the slot.

Concurrent requests presenting the same key not yet remembered share one computation: the
first computes (counted against the limits above), the others wait for its result without a
slot of their own (``joined``), so a pipeline's 16 parallel calls after a restart cost one scrypt
and none is refused. A flood of one key is therefore one scrypt too; its requests each wait for
that one computation at most.

Rows written before this scheme (``lookup`` = unsalted SHA-256 hex, with a per-key salted
SHA-256 in ``key_hash``) are still found by that digest, verified, and rewritten to the scrypt
digest on their first successful use (their keys are not known before that).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import threading
import weakref
from collections import OrderedDict

from sqlalchemy.exc import IntegrityError

from app.db.engine import Database
from app.db.models import ApiKey, AppSetting
from app.errors import ServerBusy

SCRYPT_N, SCRYPT_R, SCRYPT_P, DIGEST_BYTES = 2**14, 8, 1, 32
DIGEST_PREFIX = "s1$"
"""Marks the scrypt digest with the parameters above (a legacy SHA-256 lookup is 64 hex chars)."""
SALT_SETTING = "key_digest_salt"
CACHE_SIZE = 4096
"""Digests of known keys remembered per process (and, apart, of other keys presented)."""
MAX_CONCURRENT_KDF = 1
"""scrypt computations running at once per process: a flood of unknown keys takes one core."""
MAX_KDF_WAITING = 8
"""Presented keys waiting for the KDF beyond those computing; one more is refused (503)."""

_PROCESS_MAC_KEY = secrets.token_bytes(32)


def _bytes(key: str) -> bytes:
    return key.encode("utf-8", "surrogatepass")


def scrypt_digest(key: str, salt: bytes) -> str:
    """The stored lookup digest of ``key`` (slow: one scrypt)."""
    raw = hashlib.scrypt(
        _bytes(key),
        salt=salt,
        n=SCRYPT_N,
        r=SCRYPT_R,
        p=SCRYPT_P,
        maxmem=256 * SCRYPT_R * SCRYPT_N,
        dklen=DIGEST_BYTES,
    )
    return DIGEST_PREFIX + base64.urlsafe_b64encode(raw).decode().rstrip("=")


def legacy_lookup(key: str) -> str:
    """The unsalted SHA-256 lookup digest of rows written before the scrypt scheme."""
    return hashlib.sha256(_bytes(key)).hexdigest()


def legacy_verifies(row: ApiKey, key: str) -> bool:
    """Whether ``key`` matches a legacy row's salted SHA-256 ``key_hash``."""
    if row.salt is None or row.key_hash is None:
        return False
    expected = hashlib.sha256(_bytes(row.salt + key)).hexdigest()
    return hmac.compare_digest(row.key_hash, expected)


def is_legacy(row: ApiKey) -> bool:
    return not row.lookup.startswith(DIGEST_PREFIX)


class _Lru:
    """Digests by MAC tag, the least recently used dropped beyond ``size`` (not thread-safe:
    ``KeyDigester`` holds its lock)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: OrderedDict[bytes, str] = OrderedDict()

    def get(self, tag: bytes) -> str | None:
        found = self._items.get(tag)
        if found is not None:
            self._items.move_to_end(tag)
        return found

    def put(self, tag: bytes, value: str) -> None:
        self._items[tag] = value
        self._items.move_to_end(tag)
        while len(self._items) > self.size:
            self._items.popitem(last=False)

    def pop(self, tag: bytes) -> str | None:
        return self._items.pop(tag, None)


class _Flight:
    """One key's digest being computed, which requests presenting the same key wait for."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.value: str | None = None


class KeyDigester:
    """Lookup digests under one installation salt, remembered per process."""

    def __init__(self, salt: bytes) -> None:
        self.salt = salt
        self._known = _Lru(CACHE_SIZE)  # keys with a row (found, or minted here)
        self._presented = _Lru(CACHE_SIZE)  # other keys presented: unknown, or not yet found
        self._lock = threading.Lock()
        self._kdf_slots = threading.BoundedSemaphore(MAX_CONCURRENT_KDF)
        self._flights: dict[bytes, _Flight] = {}
        self.admitted = 0
        """Presented keys computing or waiting for a KDF slot now (at most
        ``MAX_CONCURRENT_KDF + MAX_KDF_WAITING``)."""
        self.joined = 0
        """Requests that waited for another request's computation of the same key (counted)."""

    @staticmethod
    def _tag(key: str) -> bytes:
        return hashlib.blake2b(_bytes(key), key=_PROCESS_MAC_KEY, digest_size=32).digest()

    def _lookup(self, tag: bytes) -> str | None:
        """The remembered digest of ``tag`` (the caller holds the lock)."""
        found = self._known.get(tag)
        return found if found is not None else self._presented.get(tag)

    def _remembered(self, tag: bytes) -> str | None:
        with self._lock:
            return self._lookup(tag)

    def digest(self, key: str) -> str:
        """``scrypt_digest(key, salt)`` of a presented key, computed once per process (until
        evicted), and once for all the requests presenting it while it is computed.
        ``ServerBusy`` at once, computing nothing, when ``MAX_CONCURRENT_KDF`` keys are being
        digested and ``MAX_KDF_WAITING`` more wait for a slot."""
        tag = self._tag(key)
        with self._lock:
            found = self._lookup(tag)
            if found is not None:
                return found
            flight = self._flights.get(tag)
            if flight is not None:  # the same key is being digested: wait for that
                self.joined += 1
            elif self.admitted >= MAX_CONCURRENT_KDF + MAX_KDF_WAITING:
                raise ServerBusy(
                    "too many API keys this server has not seen yet are being checked at once; "
                    "retry shortly (keys it knows are not affected)"
                )
            else:
                self.admitted += 1
                self._flights[tag] = _Flight()
        if flight is not None:
            flight.done.wait()
            if flight.value is None:  # the computation failed: this request tries on its own
                return self.digest(key)
            return flight.value
        return self._compute(key, tag)

    def _compute(self, key: str, tag: bytes) -> str:
        """The digest of ``key`` (admitted, its flight open), handed to the waiting requests."""
        value: str | None = None
        try:
            with self._kdf_slots:
                value = scrypt_digest(key, self.salt)
        finally:
            with self._lock:
                self.admitted -= 1
                if value is not None and self._known.get(tag) is None:
                    self._presented.put(tag, value)
                flight = self._flights.pop(tag)
            flight.value = value
            flight.done.set()
        return value

    def known(self, key: str, value: str) -> None:
        """Remember ``value``, the digest of ``key``, as a known key's: a row was found for it.
        Known keys are evicted only by other known keys, never by a flood of unknown ones."""
        tag = self._tag(key)
        with self._lock:
            self._presented.pop(tag)
            self._known.put(tag, value)

    def mint(self, key: str) -> str:
        """The digest of a key about to be stored (remembered as known). Never refused: it
        waits for a KDF slot however many presented keys do."""
        tag = self._tag(key)
        found = self._remembered(tag)
        if found is None:
            with self._kdf_slots:
                found = scrypt_digest(key, self.salt)
        self.known(key, found)
        return found


_digesters: weakref.WeakKeyDictionary[Database, KeyDigester] = weakref.WeakKeyDictionary()
_digesters_lock = threading.Lock()


def _installation_salt(db: Database) -> bytes:
    """The installation's salt, created by the first process that needs it."""
    with db.read() as s:
        row = s.get(AppSetting, SALT_SETTING)
        if row is not None:
            return bytes.fromhex(row.value)
    try:
        with db.write() as s:
            if s.get(AppSetting, SALT_SETTING) is None:
                s.add(AppSetting(key=SALT_SETTING, value=secrets.token_hex(16)))
    except IntegrityError:  # another process created it first
        pass
    with db.read() as s:
        row = s.get(AppSetting, SALT_SETTING)
        assert row is not None
        return bytes.fromhex(row.value)


def digester(db: Database) -> KeyDigester:
    """The digester of ``db``'s installation (salt read once per ``Database``)."""
    found = _digesters.get(db)
    if found is not None:
        return found
    with _digesters_lock:
        found = _digesters.get(db)
        if found is None:
            found = KeyDigester(_installation_salt(db))
            _digesters[db] = found
        return found


__all__ = [
    "DIGEST_PREFIX",
    "KeyDigester",
    "digester",
    "is_legacy",
    "legacy_lookup",
    "legacy_verifies",
    "scrypt_digest",
]
