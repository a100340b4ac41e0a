"""API keys: creation (shown once), digest-only storage, lookup, scopes, revocation.

A generated key looks like ``pl_<role initial>_<43 url-safe chars>`` (256 random bits); any
string of at least 32 characters works as ``PRIVACY_LEDGER_ADMIN_KEY``, so lookup does not
depend on the key's format. The table stores only the key's slow salted digest
(``app.services.key_digest``) and a fixed, non-secret id (``key_...``): nothing of the key
itself, not even a prefix.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.db.engine import Database
from app.db.models import ApiKey, AppSetting, Dataset, utcnow
from app.services import audit, key_digest
from app.services.curves import iso
from app.services.errors import Forbidden, NotFound, Unauthorized, Unprocessable

ROLES = ("viewer", "pipeline", "admin")
_RANK = {r: i for i, r in enumerate(ROLES)}


@dataclass(frozen=True)
class Principal:
    """Who is calling: key id, role and the datasets the key is scoped to (None = all)."""

    key_id: str | None
    role: str
    dataset_ids: tuple[str, ...] | None = None

    def has_role(self, role: str) -> bool:
        return _RANK[self.role] >= _RANK[role]

    def can_see(self, dataset_id: str) -> bool:
        return self.dataset_ids is None or dataset_id in self.dataset_ids

    def covers(self, dataset_ids: Sequence[str] | None) -> bool:
        """Whether a key scoped to ``dataset_ids`` (None = all) reaches nothing this principal
        cannot see: the keys a scoped admin may mint, list and revoke."""
        if self.dataset_ids is None:
            return True
        return dataset_ids is not None and set(dataset_ids) <= set(self.dataset_ids)


SYSTEM = Principal(key_id=None, role="admin")
"""The service itself (CLI commands run on the server, start-up tasks)."""


def _new_key(role: str) -> str:
    return f"pl_{role[0]}_{secrets.token_urlsafe(32)}"


def key_json(k: ApiKey) -> dict[str, Any]:
    """A key as listed (never the secret)."""
    return {
        "id": k.id,
        "role": k.role,
        "datasets": k.dataset_ids,
        "label": k.label,
        "created_at": iso(k.created_at),
        "created_by": k.created_by,
        "revoked_at": iso(k.revoked_at),
        "revoked": k.revoked_at is not None,
    }


def _insert_key(
    session: Session,
    digest: str,
    role: str,
    dataset_ids: list[str] | None,
    label: str | None,
    created_by: str | None,
) -> ApiKey:
    if role not in ROLES:
        raise Unprocessable(f"role must be one of {', '.join(ROLES)}, got {role!r}")
    row = ApiKey(
        id="key_" + secrets.token_hex(8),
        lookup=digest,
        role=role,
        dataset_ids=dataset_ids,
        label=label,
        created_at=utcnow(),
        created_by=created_by,
    )
    session.add(row)
    session.flush()
    return row


def create_key(
    db: Database,
    actor: Principal,
    role: str,
    dataset_ids: list[str] | None = None,
    label: str | None = None,
) -> dict[str, Any]:
    """Create a key; the answer is the only time the secret is shown.

    A key mints keys only within its own role and scope: a scoped key must give ``datasets``,
    all of them within its own (ids it cannot see are unknown to it, as they would be
    anywhere else: 422), and can never mint an unscoped key (403).
    """
    if role in _RANK and _RANK[role] > _RANK[actor.role]:
        raise Forbidden(f"a {actor.role!r} key cannot create a {role!r} key")
    if actor.dataset_ids is not None and dataset_ids is None:
        raise Forbidden(
            "a key scoped to datasets can only create keys scoped to some of them: give "
            "'datasets' (a subset of this key's datasets)"
        )
    key = _new_key(role)
    digest = key_digest.digester(db).digest(key)
    with db.write() as s:
        if dataset_ids is not None:
            dataset_ids = list(dict.fromkeys(dataset_ids))
            found = set(s.scalars(select(Dataset.id).where(Dataset.id.in_(dataset_ids))))
            missing = [d for d in dataset_ids if d not in found or not actor.can_see(d)]
            if missing:
                raise Unprocessable(f"unknown dataset ids: {missing}", unknown=missing)
        row = _insert_key(s, digest, role, dataset_ids, label, actor.key_id)
        audit.record(
            s,
            actor,
            "key.created",
            target_id=row.id,
            details={"role": role, "datasets": dataset_ids, "label": label},
        )
        return {**key_json(row), "key": key}


def list_keys(db: Database, principal: Principal = SYSTEM) -> list[dict[str, Any]]:
    """The keys ``principal`` covers (a scoped admin: the keys within its scope), newest
    first, without secrets."""
    with db.read() as s:
        rows = s.scalars(select(ApiKey).order_by(ApiKey.created_at.desc()))
        return [key_json(k) for k in rows if principal.covers(k.dataset_ids)]


def revoke_key(db: Database, actor: Principal, key_id: str) -> dict[str, Any]:
    """Revoke a key (idempotent). A key outside the actor's scope is not found (404), as in
    the listing. The last active unscoped admin key cannot be revoked (403): without it no
    one could create datasets or manage every key."""
    with db.write() as s:
        row = s.get(ApiKey, key_id)
        if row is None or not actor.covers(row.dataset_ids):
            raise NotFound(f"no key {key_id!r}")
        if row.revoked_at is None:
            if row.role == "admin" and row.dataset_ids is None:
                others = s.scalars(
                    select(ApiKey.dataset_ids).where(
                        ApiKey.role == "admin", ApiKey.revoked_at.is_(None), ApiKey.id != row.id
                    )
                ).all()
                if all(scope is not None for scope in others):
                    raise Forbidden("refusing to revoke the last active unscoped admin key")
            row.revoked_at = utcnow()
            audit.record(s, actor, "key.revoked", target_id=row.id, details={"role": row.role})
        return key_json(row)


def _find(db: Database, key: str) -> ApiKey | None:
    """The row of ``key``: by its scrypt digest, or a legacy row by its SHA-256 lookup (verified
    with its salted hash, then upgraded to the scrypt digest: once per legacy key)."""
    digest = key_digest.digester(db).digest(key)
    with db.read() as s:
        row = s.scalars(select(ApiKey).where(ApiKey.lookup == digest)).first()
        if row is None:  # unknown, or stored the old way: one more indexed query
            legacy = key_digest.legacy_lookup(key)
            row = s.scalars(select(ApiKey).where(ApiKey.lookup == legacy)).first()
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


def authenticate(db: Database, key: str | None) -> Principal:
    """The principal for a presented key, or ``Unauthorized``. In steady state: one keyed
    BLAKE2b, one dictionary lookup and one indexed query (the scrypt is paid once per key and
    process)."""
    if not key:
        raise Unauthorized("an API key is required: send 'Authorization: Bearer <key>'")
    row = _find(db, key)
    if row is None:
        raise Unauthorized("unknown API key")
    if row.revoked_at is not None:
        raise Unauthorized("this API key has been revoked")
    ids = tuple(row.dataset_ids) if row.dataset_ids is not None else None
    return Principal(key_id=row.id, role=row.role, dataset_ids=ids)


def ensure_admin_key(db: Database, key: str) -> str:
    """Make sure an active admin key with exactly this value exists (for automation)."""
    row = _find(db, key)
    if row is not None:
        if row.revoked_at is None and row.role == "admin" and row.dataset_ids is None:
            return row.id
        raise Forbidden(
            "PRIVACY_LEDGER_ADMIN_KEY matches a revoked, scoped or non-admin key; choose another "
            "value"
        )
    digest = key_digest.digester(db).digest(key)
    try:
        with db.write() as s:
            row = _insert_key(
                s, digest, "admin", None, "bootstrap (PRIVACY_LEDGER_ADMIN_KEY)", None
            )
            audit.record(
                s,
                SYSTEM,
                "key.created",
                target_id=row.id,
                details={"role": "admin", "bootstrap": "env"},
            )
            return row.id
    except IntegrityError:  # another replica inserted it first
        found = _find(db, key)
        assert found is not None
        return found.id


def bootstrap_first_key(db: Database) -> str | None:
    """On an installation without any key, create one admin key and return it (once, ever)."""
    key = _new_key("admin")
    digest = key_digest.digester(db).digest(key)
    try:
        with db.write() as s:
            if s.get(AppSetting, "bootstrap_admin") is not None:
                return None
            if s.scalars(select(ApiKey.id)).first() is not None:
                return None
            s.add(AppSetting(key="bootstrap_admin", value=utcnow().isoformat()))
            s.flush()
            row = _insert_key(s, digest, "admin", None, "bootstrap (first start)", None)
            audit.record(
                s,
                SYSTEM,
                "key.created",
                target_id=row.id,
                details={"role": "admin", "bootstrap": "first-start"},
            )
    except IntegrityError:  # another replica won the race
        return None
    return key


def require_role(principal: Principal, role: str) -> None:
    """``Forbidden`` unless the principal's role is at least ``role``."""
    if not principal.has_role(role):
        raise Forbidden(f"this endpoint needs the {role!r} role; the key has {principal.role!r}")


__all__ = [
    "ROLES",
    "SYSTEM",
    "Principal",
    "authenticate",
    "bootstrap_first_key",
    "create_key",
    "ensure_admin_key",
    "key_json",
    "list_keys",
    "require_role",
    "revoke_key",
]
