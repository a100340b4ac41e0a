"""API keys: creation (shown once), digest-only storage, scopes, revocation.

A generated key looks like ``pl_<role initial>_<43 url-safe chars>`` (256 random bits); any
string of at least 32 characters works as ``PRIVACY_LEDGER_ADMIN_KEY``, so lookup does not
depend on the key's format. The table stores only the key's slow salted digest
(``app.services.key_digest``) and a fixed, non-secret id (``key_...``): nothing of the key
itself, not even a prefix. Finding a key: ``app.services.auth``.
"""

from __future__ import annotations

import secrets
import unicodedata
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import or_, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app import responses as r
from app.db.engine import Database
from app.db.models import Allocation, ApiKey, AppSetting, Dataset, utcnow
from app.errors import Conflict, Forbidden, NotFound, Unprocessable
from app.principal import SYSTEM, Caller, Principal, Role
from app.services import audit, key_digest
from app.services.auth import (
    KEYS_REVOKED_AT,
    authenticated,
    confirm_active,
    find_key,
    forget_keys,
)

_K = ApiKey.__table__.c


_NEVER = datetime(1970, 1, 1, tzinfo=UTC).isoformat()  # KEYS_REVOKED_AT before any revocation


def _serialise_key_changes(s: Session, revoked_at: datetime | None) -> None:
    """Take the installation's key-change lock (the ``KEYS_REVOKED_AT`` row, written by an
    upsert, which on PostgreSQL holds its row lock until commit; SQLite's ``BEGIN IMMEDIATE``
    already serialises every write), and record ``revoked_at`` as the last revocation. Key
    creations and revocations then run one at a time: two admin keys revoking each other at
    once can no longer each see the other still active and both go."""
    dialect = s.get_bind().dialect.name
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    value = revoked_at.isoformat() if revoked_at is not None else _NEVER
    stmt = insert(AppSetting).values(key=KEYS_REVOKED_AT, value=value)
    keep = stmt.excluded.value if revoked_at is not None else AppSetting.value
    s.execute(stmt.on_conflict_do_update(index_elements=[AppSetting.key], set_={"value": keep}))


def _check_label(s: Session, label: str | None, actor: Principal) -> None:
    """409 when ``label`` reads as the label of a key outside the actor's reach (the same as
    ``_shown`` reads them; revoked keys too: their entries keep their label): the ledger and
    the dashboard name the key that made each entry by its label, so a scoped admin must not
    mint a key that reads as someone else's. Within its reach (rotating
    a key, or an unscoped admin) a label may repeat; the key id stays the identity."""
    if label is None:
        return
    shown = _shown(label)
    rows = s.execute(
        select(_K.label, _K.dataset_ids, _K.allocations).where(_K.label.is_not(None))
    ).all()
    if any(
        _shown(row.label) == shown and not actor.covers(row.dataset_ids, row.allocations)
        for row in rows
    ):
        raise Conflict(
            f"label {label!r} reads as the label of a key outside this key's scope; choose another",
            label=label,
        )


def _shown(label: str) -> str:
    """A label as a reader tells it apart: compatibility forms as their plain characters (NFKC:
    a fullwidth letter is the letter), the characters a page does not show dropped (format and
    control characters: zero-width spaces and joiners, soft hyphens, direction marks, DEL),
    runs of spaces as one, case folded."""
    plain = unicodedata.normalize("NFKC", label)
    shown = "".join(ch for ch in plain if ch.isspace() or unicodedata.category(ch)[0] != "C")
    return " ".join(shown.split()).casefold()


def _new_key(role: Role) -> str:
    return f"pl_{role.value[0]}_{secrets.token_urlsafe(32)}"


def key_answer(k: ApiKey) -> r.Key:
    """A key as listed (never the secret, nor any part of it)."""
    return r.Key(
        id=k.id,
        role=k.role.value,
        datasets=k.dataset_ids,
        allocations=k.allocations,
        label=k.label,
        created_at=k.created_at,
        created_by=k.created_by,
        revoked_at=k.revoked_at,
        revoked=k.revoked_at is not None,
    )


def _insert_key(
    session: Session,
    digest: str,
    role: Role,
    dataset_ids: list[str] | None,
    label: str | None,
    created_by: str | None,
    allocations: list[str] | None = None,
) -> ApiKey:
    row = ApiKey(
        id="key_" + secrets.token_hex(8),
        lookup=digest,
        role=role,
        dataset_ids=dataset_ids,
        label=label,
        created_at=utcnow(),
        created_by=created_by,
        allocations=allocations,
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
    allocations: list[str] | None = None,
) -> r.KeyCreated:
    """Create a key; the answer is the only time the secret is shown.

    A key mints keys only within its own role and scope: a scoped key must give ``datasets``,
    all of them within its own (ids it cannot see are unknown to it, as they would be
    anywhere else: 422), and can never mint an unscoped key (403). Made by ``SYSTEM`` (the
    CLI's ``--local``, on the database itself), its audit event says ``"via": "local"``.
    """
    actor = authenticated(db, caller)
    if role.rank > actor.role.rank:
        raise Forbidden(f"a {actor.role.value!r} key cannot create a {role.value!r} key")
    if actor.dataset_ids is not None and dataset_ids is None:
        raise Forbidden(
            "a key scoped to datasets can only create keys scoped to some of them: give "
            "'datasets' (a subset of this key's datasets)"
        )
    if actor.allocations is not None and (
        allocations is None or not set(allocations) <= set(actor.allocations)
    ):
        raise Forbidden(
            "a key limited to allocations can only create keys limited to some of them: give "
            f"'allocations' (a subset of {list(actor.allocations)})"
        )
    key = _new_key(role)
    digest = key_digest.digester(db).mint(key)
    with db.write() as s:
        _serialise_key_changes(s, None)
        confirm_active(s, actor)
        _check_label(s, label, actor)
        if dataset_ids is not None:
            dataset_ids = _resolve_datasets(s, list(dict.fromkeys(dataset_ids)), actor)
        if allocations is not None:  # within the datasets resolved above
            allocations = list(dict.fromkeys(allocations))
            _check_allocations(s, allocations, dataset_ids, actor)
        row = _insert_key(s, digest, role, dataset_ids, label, actor.key_id, allocations)
        details: dict[str, Any] = {"role": role.value, "datasets": dataset_ids, "label": label}
        if allocations is not None:
            details["allocations"] = allocations
        if actor is SYSTEM:  # no key made it: ``privacy-ledger keys create --local``
            details["via"] = "local"
        audit.record(s, actor, "key.created", target_id=row.id, details=details)
        return r.KeyCreated(**key_answer(row).model_dump(), key=key)


def _resolve_datasets(s: Session, refs: list[str], actor: Principal) -> list[str]:
    """The ids of the datasets ``refs`` name (each an id, or else a unique name, as every
    dataset route resolves them); 422 naming those that are unknown or outside the actor's
    scope. The key stores ids, so a later rename does not change what it reaches."""
    rows = s.execute(
        select(Dataset.id, Dataset.name).where(or_(Dataset.id.in_(refs), Dataset.name.in_(refs)))
    ).all()
    by_id = {row.id for row in rows}
    by_name = {row.name: row.id for row in rows}
    resolved, missing = [], []
    for ref in refs:
        found = ref if ref in by_id else by_name.get(ref)
        if found is None or not actor.can_see(found):
            missing.append(ref)
        else:
            resolved.append(found)
    if missing:
        raise Unprocessable(f"unknown datasets (ids or names): {missing}", unknown=missing)
    return list(dict.fromkeys(resolved))


def _check_allocations(
    s: Session, names: list[str], dataset_ids: list[str] | None, actor: Principal
) -> None:
    """422 unless each name is an allocation of some dataset within the key's (and the
    actor's) scope: a typo would otherwise lock the key out of every charge."""
    q = select(Allocation.name).where(Allocation.name.in_(names))
    scope = dataset_ids if dataset_ids is not None else actor.dataset_ids
    if scope is not None:
        q = q.where(Allocation.dataset_id.in_(list(scope)))
    found = set(s.scalars(q))
    unknown = [n for n in names if n not in found]
    if unknown:
        raise Unprocessable(
            f"unknown allocations {unknown} (no dataset within the key's scope has them)",
            unknown_allocations=unknown,
        )


def list_keys(db: Database, caller: Caller) -> r.KeyList:
    """The keys the caller covers (a scoped admin: the keys within its scope), newest first,
    without secrets."""
    with db.read() as s:
        principal = authenticated(db, caller, s)
        rows = s.scalars(select(ApiKey).order_by(_K.created_at.desc()))
        return r.KeyList(
            keys=[key_answer(k) for k in rows if principal.covers(k.dataset_ids, k.allocations)]
        )


def revoke_key(db: Database, caller: Caller, key_id: str) -> r.Key:
    """Revoke a key (idempotent). A key outside the actor's scope is not found (404), as in
    the listing. The last active unscoped admin key cannot be revoked (403): without it no
    one could create datasets or manage every key."""
    actor = authenticated(db, caller)
    with db.write() as s:
        now = utcnow()
        # one key change at a time (see there); the last revocation's time is written only
        # when this call revokes: revoking an already revoked (or unknown) key changes nothing,
        # so it must not make every in-flight write confirm its key again
        _serialise_key_changes(s, None)
        confirm_active(s, actor)
        row = s.get(ApiKey, key_id)
        if row is None or not actor.covers(row.dataset_ids, row.allocations):
            raise NotFound(f"no key {key_id!r}")
        if row.revoked_at is None:
            # a full admin key: all datasets and not limited to allocations (only such a key
            # creates datasets and changes budgets)
            if row.role is Role.ADMIN and row.dataset_ids is None and row.allocations is None:
                others = s.execute(
                    select(_K.dataset_ids, _K.allocations).where(
                        _K.role == Role.ADMIN, _K.revoked_at.is_(None), _K.id != row.id
                    )
                ).all()
                if all(o.dataset_ids is not None or o.allocations is not None for o in others):
                    raise Forbidden("refusing to revoke the last active unscoped admin key")
            row.revoked_at = now
            _serialise_key_changes(s, now)
            audit.record(
                s, actor, "key.revoked", target_id=row.id, details={"role": row.role.value}
            )
        answer = key_answer(row)
    forget_keys(db)  # committed: this process stops accepting the key now
    return answer


def ensure_admin_key(db: Database, key: str) -> str:
    """Make sure an active unscoped admin key with exactly this value exists (for automation).

    Several workers or replicas start at once: when another one inserts the key first, the
    unique index refuses our insert and we read theirs."""
    row = find_key(db, key)
    if row is not None:
        if row.revoked_at is None and row.role is Role.ADMIN and row.dataset_ids is None:
            return row.id
        raise Forbidden(
            "PRIVACY_LEDGER_ADMIN_KEY matches a revoked, scoped or non-admin key; choose another "
            "value"
        )
    digest = key_digest.digester(db).mint(key)
    try:
        with db.write() as s:
            row = _insert_key(
                s, digest, Role.ADMIN, None, "bootstrap (PRIVACY_LEDGER_ADMIN_KEY)", None
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
        found = find_key(db, key)
        assert found is not None
        return found.id


def bootstrap_first_key(db: Database) -> str | None:
    """On an installation without any key, create one admin key and return it (once, ever)."""
    key = _new_key(Role.ADMIN)
    digest = key_digest.digester(db).mint(key)
    try:
        with db.write() as s:
            if s.get(AppSetting, "bootstrap_admin") is not None:
                return None
            if s.scalars(select(ApiKey.id)).first() is not None:
                return None
            s.add(AppSetting(key="bootstrap_admin", value=utcnow().isoformat()))
            s.flush()
            row = _insert_key(s, digest, Role.ADMIN, None, "bootstrap (first start)", None)
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
