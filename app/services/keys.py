"""API keys: creation (shown once), salted-hash storage, constant-time lookup, revocation.

A key looks like ``pl_<role initial>_<43 url-safe chars>`` (256 random bits). The table stores
``lookup`` = SHA-256 of the key (a public index: it reveals nothing usable, the key has 256
bits of entropy), and ``key_hash`` = SHA-256(salt || key) with a per-key random salt, compared
with ``hmac.compare_digest``. Any string works as a key (``PRIVACY_LEDGER_ADMIN_KEY`` is
whatever the operator chose), so lookup does not depend on the key's format.
"""

from __future__ import annotations

import hmac
import secrets

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app import responses as r
from app.db.engine import Database
from app.db.models import ApiKey, AppSetting, Dataset, utcnow
from app.errors import Forbidden, NotFound, Unprocessable
from app.principal import SYSTEM, Caller, Role
from app.services import audit
from app.services.auth import authenticate, key_digest, lookup_digest

_K = ApiKey.__table__.c


def _new_key(role: Role) -> str:
    return f"pl_{role.value[0]}_{secrets.token_urlsafe(32)}"


def key_answer(k: ApiKey) -> r.Key:
    """A key as listed (never the secret)."""
    return r.Key(
        id=k.id,
        prefix=k.prefix,
        role=k.role.value,
        datasets=k.dataset_ids,
        label=k.label,
        created_at=k.created_at,
        created_by=k.created_by,
        revoked_at=k.revoked_at,
        revoked=k.revoked_at is not None,
    )


def _insert_key(
    session: Session,
    key: str,
    role: Role,
    dataset_ids: list[str] | None,
    label: str | None,
    created_by: str | None,
) -> ApiKey:
    salt = secrets.token_hex(16)
    row = ApiKey(
        id="key_" + secrets.token_hex(8),
        lookup=lookup_digest(key),
        salt=salt,
        key_hash=key_digest(salt, key),
        prefix=key[:8],
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
    caller: Caller,
    role: Role,
    dataset_ids: list[str] | None = None,
    label: str | None = None,
) -> r.KeyCreated:
    """Create a key; the answer is the only time the secret is shown."""
    key = _new_key(role)
    with db.write() as s:
        actor = authenticate(s, caller)
        if dataset_ids is not None:
            dataset_ids = list(dict.fromkeys(dataset_ids))
            found = set(s.scalars(select(Dataset.id).where(Dataset.id.in_(dataset_ids))))
            missing = [d for d in dataset_ids if d not in found]
            if missing:
                raise Unprocessable(f"unknown dataset ids: {missing}", unknown=missing)
        row = _insert_key(s, key, role, dataset_ids, label, actor.key_id)
        audit.record(
            s,
            actor,
            "key.created",
            target_id=row.id,
            details={"role": role.value, "datasets": dataset_ids, "label": label},
        )
        return r.KeyCreated(**key_answer(row).model_dump(), key=key)


def list_keys(db: Database, caller: Caller) -> r.KeyList:
    """Every key, newest first, without secrets."""
    with db.read() as s:
        authenticate(s, caller)
        rows = s.scalars(select(ApiKey).order_by(ApiKey.created_at.desc()))
        return r.KeyList(keys=[key_answer(k) for k in rows])


def revoke_key(db: Database, caller: Caller, key_id: str) -> r.Key:
    """Revoke a key (idempotent). The last active admin key cannot be revoked."""
    with db.write() as s:
        actor = authenticate(s, caller)
        row = s.get(ApiKey, key_id)
        if row is None:
            raise NotFound(f"no key {key_id!r}")
        if row.revoked_at is None:
            if row.role is Role.ADMIN:
                others = s.scalars(
                    select(ApiKey.id).where(
                        _K.role == Role.ADMIN, _K.revoked_at.is_(None), _K.id != row.id
                    )
                ).first()
                if others is None:
                    raise Forbidden("refusing to revoke the last active admin key")
            row.revoked_at = utcnow()
            audit.record(
                s, actor, "key.revoked", target_id=row.id, details={"role": row.role.value}
            )
        return key_answer(row)


def ensure_admin_key(db: Database, key: str) -> str:
    """Make sure an active admin key with exactly this value exists (for automation).

    Several workers or replicas start at once: when another one inserts the key first, the
    unique index refuses our insert and we read theirs."""
    try:
        return _ensure_admin_key(db, key)
    except IntegrityError:
        return _ensure_admin_key(db, key)


def _ensure_admin_key(db: Database, key: str) -> str:
    with db.write() as s:
        row = s.scalars(select(ApiKey).where(_K.lookup == lookup_digest(key))).first()
        if row is not None and hmac.compare_digest(row.key_hash, key_digest(row.salt, key)):
            if row.revoked_at is None and row.role is Role.ADMIN:
                return row.id
            raise Forbidden(
                "PRIVACY_LEDGER_ADMIN_KEY matches a revoked or non-admin key; choose another value"
            )
        row = _insert_key(s, key, Role.ADMIN, None, "bootstrap (PRIVACY_LEDGER_ADMIN_KEY)", None)
        audit.record(
            s,
            SYSTEM,
            "key.created",
            target_id=row.id,
            details={"role": "admin", "bootstrap": "env"},
        )
        return row.id


def bootstrap_first_key(db: Database) -> str | None:
    """On an installation without any key, create one admin key and return it (once, ever)."""
    key = _new_key(Role.ADMIN)
    try:
        with db.write() as s:
            if s.get(AppSetting, "bootstrap_admin") is not None:
                return None
            if s.scalars(select(ApiKey.id)).first() is not None:
                return None
            s.add(AppSetting(key="bootstrap_admin", value=utcnow().isoformat()))
            s.flush()
            row = _insert_key(s, key, Role.ADMIN, None, "bootstrap (first start)", None)
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


__all__ = [
    "bootstrap_first_key",
    "create_key",
    "ensure_admin_key",
    "key_answer",
    "list_keys",
    "revoke_key",
]
