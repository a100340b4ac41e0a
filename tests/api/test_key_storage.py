"""Issue 10, item 5: keys are stored so that a database dump gives nothing cheap to guess.

* ``PRIVACY_LEDGER_ADMIN_KEY`` shorter than 32 characters stops the server at start-up.
* Nothing of a key is stored or listed beyond its fixed id ``key_...`` (no prefix).
* The lookup digest is scrypt under an installation salt (not an unsalted SHA-256), computed
  once per key and process (counted, not timed); rows written the old way are found, verified
  and rewritten on their first use, also across the migration that drops the prefix.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError
from sqlalchemy import create_engine, inspect, select, text

from app.config import Settings
from app.db import migrate
from app.db.models import ApiKey, AppSetting, Base
from app.main import create_app
from app.principal import Credentials, Role
from app.services import key_digest
from tests.conftest import ADMIN_KEY, make_settings
from tests.live import Server


@pytest.mark.parametrize("key", ["hunter2", "x" * 31, "short-but-not-empty-key-0123456"])
def test_short_operator_keys_are_refused_by_the_settings(key: str) -> None:
    with pytest.raises(ValidationError, match="at least 32 characters"):
        Settings(admin_key=key)


def test_operator_key_of_32_characters_or_unset_is_accepted() -> None:
    assert Settings(admin_key="k" * 32).admin_key == "k" * 32
    assert Settings(admin_key="").admin_key is None  # an empty variable means unset
    assert Settings(admin_key=None).admin_key is None


def test_the_server_does_not_start_with_a_short_operator_key(sqlite_url: str) -> None:
    server = Server(sqlite_url, "hunter2")
    with pytest.raises(RuntimeError) as failed:
        server.start()
    server.stop()
    message = str(failed.value)
    assert "PRIVACY_LEDGER_ADMIN_KEY" in message and "at least 32 characters" in message
    assert "Traceback" not in message  # a clear start-up error, not a stack


def _rows(db_url: str) -> list[dict[str, Any]]:
    engine = create_engine(db_url)
    try:
        with engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(select(ApiKey.__table__))]
    finally:
        engine.dispose()


def _everything_stored(db_url: str) -> str:
    engine = create_engine(db_url)
    try:
        with engine.connect() as conn:
            return "\n".join(
                str(tuple(row))
                for t in Base.metadata.sorted_tables
                for row in conn.execute(select(t))
            )
    finally:
        engine.dispose()


def test_nothing_of_a_key_is_stored_or_listed(client: TestClient, db_url: str) -> None:
    created = client.post("/v1/keys", json={"role": "pipeline", "label": "etl"}).json()
    key = created["key"]
    assert set(created) >= {"id", "key", "role", "datasets"} and "prefix" not in created
    assert client.get("/v1/datasets", headers={"Authorization": f"Bearer {key}"}).status_code == 200
    stored = _everything_stored(db_url)
    secret = key.removeprefix("pl_p_")
    for i in range(0, len(secret) - 6):  # no 6 consecutive characters of the secret part
        assert secret[i : i + 6] not in stored
    assert ADMIN_KEY not in stored and ADMIN_KEY[:8] not in stored
    for listed in client.get("/v1/keys").json()["keys"]:
        assert "prefix" not in listed
        assert secret[:6] not in str(listed) and ADMIN_KEY[:8] not in str(listed)
    engine = create_engine(db_url)
    try:
        assert "prefix" not in {c["name"] for c in inspect(engine).get_columns("api_key")}
    finally:
        engine.dispose()


def test_lookup_digest_is_scrypt_under_the_installation_salt(
    production_kdf: None, client: TestClient, db_url: str
) -> None:
    created = client.post("/v1/keys", json={"role": "viewer"}).json()
    [row] = [r for r in _rows(db_url) if r["id"] == created["id"]]
    engine = create_engine(db_url)
    try:
        with engine.connect() as conn:
            salt = conn.execute(
                select(AppSetting.value).where(AppSetting.key == key_digest.SALT_SETTING)
            ).scalar_one()
    finally:
        engine.dispose()
    assert len(bytes.fromhex(salt)) == 16
    # scrypt at the documented cost (N = 2**14, r = 8, p = 1, 32 bytes), computed here
    raw = hashlib.scrypt(
        created["key"].encode(), salt=bytes.fromhex(salt), n=2**14, r=8, p=1, dklen=32
    )
    assert row["lookup"] == "s1$" + base64.urlsafe_b64encode(raw).decode().rstrip("=")
    assert row["lookup"] != hashlib.sha256(created["key"].encode()).hexdigest()
    assert row["salt"] is None and row["key_hash"] is None


def test_a_key_costs_one_scrypt_per_process(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    created = client.post("/v1/keys", json={"role": "viewer"}).json()
    calls: list[str] = []
    real = key_digest.scrypt_digest

    def counted(key: str, salt: bytes) -> str:
        calls.append(key)
        return real(key, salt)

    monkeypatch.setattr(key_digest, "scrypt_digest", counted)
    headers = {"Authorization": f"Bearer {created['key']}"}
    for _ in range(20):
        assert client.get("/v1/datasets", headers=headers).status_code == 200
    assert calls == []  # minted in this process: its digest was remembered then
    unknown = {"Authorization": "Bearer pl_v_" + secrets.token_urlsafe(32)}
    for _ in range(5):
        assert client.get("/v1/datasets", headers=unknown).status_code == 401
    assert len(calls) == 1  # an unknown key is remembered too


def _legacy_row(key: str, key_id: str, role: str = "admin") -> dict[str, Any]:
    salt = secrets.token_hex(16)
    return {
        "id": key_id,
        "lookup": hashlib.sha256(key.encode()).hexdigest(),
        "salt": salt,
        "key_hash": hashlib.sha256((salt + key).encode()).hexdigest(),
        "role": role,
    }


def _insert_legacy(db_url: str, row: dict[str, Any], with_prefix: bool = False) -> None:
    engine = create_engine(db_url)
    columns = "id, lookup, salt, key_hash, role, created_at" + (", prefix" if with_prefix else "")
    values = ":id, :lookup, :salt, :key_hash, :role, CURRENT_TIMESTAMP" + (
        ", :prefix" if with_prefix else ""
    )
    try:
        with engine.begin() as conn:
            conn.execute(
                text(f"INSERT INTO api_key ({columns}) VALUES ({values})"),
                {**row, "prefix": "pl_a_abc"},
            )
    finally:
        engine.dispose()


def test_legacy_rows_are_verified_and_upgraded_on_first_use(
    client: TestClient, db_url: str
) -> None:
    key = "pl_v_" + secrets.token_urlsafe(32)
    _insert_legacy(db_url, _legacy_row(key, "key_legacy000001", role="viewer"))
    wrong_hash = _legacy_row("pl_v_other-key-0123456789abcdefghijk", "key_legacy000003")
    wrong_hash["key_hash"] = "0" * 64
    _insert_legacy(db_url, wrong_hash)

    me = {"Authorization": f"Bearer {key}"}
    assert client.get("/v1/datasets", headers=me).status_code == 200
    assert client.get("/v1/keys", headers=me).status_code == 403  # still a viewer
    rows = {r["id"]: r for r in _rows(db_url)}
    upgraded = rows["key_legacy000001"]
    assert upgraded["lookup"].startswith(key_digest.DIGEST_PREFIX)
    assert upgraded["salt"] is None and upgraded["key_hash"] is None
    assert client.get("/v1/datasets", headers=me).status_code == 200  # found by scrypt now
    other = {"Authorization": "Bearer pl_v_other-key-0123456789abcdefghijk"}
    assert client.get("/v1/datasets", headers=other).status_code == 401  # hash does not verify
    assert not rows["key_legacy000003"]["lookup"].startswith(key_digest.DIGEST_PREFIX)


def test_keys_made_before_the_migration_keep_working(db_url: str) -> None:
    """A key row written by revision 0001 (with its prefix) survives the upgrade to head."""
    migrate.downgrade(db_url, "0001")  # an empty ledger: no force needed
    key = "operator-chosen-admin-key-0123456789-abcdef"
    try:
        _insert_legacy(db_url, _legacy_row(key, "key_legacy0000aa"), with_prefix=True)
    finally:
        migrate.upgrade(db_url)
    app = create_app(make_settings(db_url))
    with TestClient(app) as c:
        r = c.get("/v1/keys", headers={"Authorization": f"Bearer {key}"})
        assert r.status_code == 200
        listed = {k["id"]: k for k in r.json()["keys"]}
        assert "prefix" not in listed["key_legacy0000aa"]
    [row] = [r for r in _rows(db_url) if r["id"] == "key_legacy0000aa"]
    assert row["lookup"].startswith(key_digest.DIGEST_PREFIX) and "prefix" not in row


def test_no_repr_shows_a_presented_or_configured_key() -> None:
    """A request's ``Credentials`` and the ``Settings`` showed the key in their repr (authz46):
    what a debugger, a traceback with its locals or an error tracker writes down."""
    key = "k" * 40
    assert key not in repr(Credentials(key, Role.ADMIN))
    assert key not in repr(Settings(admin_key=key, database_url="sqlite://"))
    assert Credentials(key, Role.ADMIN).token == key  # (still there to be checked)
