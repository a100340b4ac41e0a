"""How API keys are stored: a slow, salted digest that a database dump cannot cheaply guess.

A key is found by its *lookup digest*, ``"s1$" + base64url(scrypt(key, salt, N=2**14, r=8,
p=1, 32 bytes))`` [RFC 7914], where ``salt`` is 16 random bytes made once per installation
(``app_setting`` row ``key_digest_salt``; deleting it invalidates every key). The digest is
deterministic, so one indexed query finds the row; it is also the only thing stored. Each guess
against a dump costs one scrypt (about 16 MiB and tens of milliseconds), instead of one SHA-256:
generated keys (256 random bits) were never guessable, and this keeps a weak-ish operator key
(``PRIVACY_LEDGER_ADMIN_KEY``, at least 32 characters) out of reach as well.

Authentication is on every request's path, so each process remembers the digests it computed
in a bounded LRU keyed by a BLAKE2b MAC of the key under a per-process random key (the key
itself is not kept): a key costs one scrypt per process, then a dictionary lookup. At most
``MAX_CONCURRENT_KDF`` scrypt computations run at once, so a flood of unknown keys queues there
instead of taking every core from requests whose keys are already known.

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

SCRYPT_N, SCRYPT_R, SCRYPT_P, DIGEST_BYTES = 2**14, 8, 1, 32
DIGEST_PREFIX = "s1$"
"""Marks the scrypt digest with the parameters above (a legacy SHA-256 lookup is 64 hex chars)."""
SALT_SETTING = "key_digest_salt"
CACHE_SIZE = 4096
MAX_CONCURRENT_KDF = 2

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


class KeyDigester:
    """Lookup digests under one installation salt, remembered per process."""

    def __init__(self, salt: bytes) -> None:
        self.salt = salt
        self._cache: OrderedDict[bytes, str] = OrderedDict()
        self._lock = threading.Lock()
        self._kdf_slots = threading.BoundedSemaphore(MAX_CONCURRENT_KDF)

    def digest(self, key: str) -> str:
        """``scrypt_digest(key, salt)``, computed once per process for a given key."""
        tag = hashlib.blake2b(_bytes(key), key=_PROCESS_MAC_KEY, digest_size=32).digest()
        with self._lock:
            found = self._cache.get(tag)
            if found is not None:
                self._cache.move_to_end(tag)
                return found
        with self._kdf_slots:
            value = scrypt_digest(key, self.salt)
        with self._lock:
            self._cache[tag] = value
            while len(self._cache) > CACHE_SIZE:
                self._cache.popitem(last=False)
        return value


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
