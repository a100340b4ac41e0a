"""Key changes and who may act, from the stop 32 security audit (SQLite and PostgreSQL).

1. Two unscoped admin keys revoking each other at once: on PostgreSQL both revocations used to
   commit (each saw the other still active), leaving no unscoped admin key. Key changes now run
   one at a time (``keys._serialise_key_changes``).
2. A request authenticated before its key was revoked, and still waiting for a lock, used to
   commit after the revocation had answered. Writes confirm their key under their lock when a
   revocation may have happened since it was read (``auth.may_be_revoked``/``confirm_active``).
3. Any pipeline key of a dataset could release another key's hold (its run then went
   uncharged): only the key that made it, or an admin (audited), may release it.
4. A scoped admin could give a new key the label of a key outside its scope (entries then read
   as that key's), also with an invisible character added (authz46).
5. An unknown key got 422, not 401, from two endpoints that checked their input first.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.db.engine import Database
from app.errors import ProblemError
from app.principal import SYSTEM, Caller, Credentials, Principal, Role
from app.services import auth, charges, datasets, keys, reservations
from tests.conftest import ADMIN, ADMIN_KEY, new_dataset, run_sql

GAUSS = {"mechanism": {"mechanism": "gaussian", "sigma": 5.0}}


def _bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _mint(client: TestClient, body: dict[str, Any], headers: dict[str, str] = ADMIN) -> Any:
    r = client.post("/v1/keys", json=body, headers=headers)
    assert r.status_code == 201, r.text
    return r.json()


def _db(client: TestClient) -> Database:
    db: Database = client.app.state.db  # type: ignore[attr-defined]
    return db


def test_two_admins_revoking_each_other_at_once_leave_one(client: TestClient, db_url: str) -> None:
    db = _db(client)
    # the fixture's admin key and one more are the only unscoped admins; each trial races a
    # fresh pair: the survivor of the last trial and a key it mints
    token, key_id = ADMIN_KEY, _key_id(db_url, ADMIN_KEY, client)
    for _ in range(6):
        other = _mint(client, {"role": "admin"}, headers=_bearer(token))
        pair = [(token, key_id, other["id"]), (other["key"], other["id"], key_id)]
        barrier = threading.Barrier(2)
        outcome: dict[str, int] = {}

        def revoke(
            me: str,
            mine: str,
            theirs: str,
            barrier: threading.Barrier = barrier,
            outcome: dict[str, int] = outcome,
        ) -> None:
            barrier.wait()
            try:
                keys.revoke_key(db, Credentials(me, Role.ADMIN), theirs)
                outcome[mine] = 200
            except ProblemError as exc:
                outcome[mine] = exc.status

        threads = [threading.Thread(target=revoke, args=p) for p in pair]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        active = run_sql(
            db_url,
            "SELECT id FROM api_key WHERE role = 'admin' AND revoked_at IS NULL AND id IN (:a, :b)",
            a=key_id,
            b=other["id"],
        )
        assert len(active) == 1, outcome  # never both revoked, never neither
        assert sorted(outcome.values())[0] == 200, outcome
        # the loser was revoked first (401) or found itself the last one (403)
        assert sorted(outcome.values())[1] in (401, 403), outcome
        survivor = active[0][0]
        token, key_id = (token, key_id) if survivor == key_id else (other["key"], other["id"])


def _key_id(db_url: str, token: str, client: TestClient) -> str:
    principal = auth.authenticated(_db(client), Credentials(token, Role.VIEWER))
    assert principal.key_id is not None
    return principal.key_id


def _revoked_right_after_authentication(
    monkeypatch: pytest.MonkeyPatch, module: Any, db: Database, key_id: str
) -> None:
    """``module.authenticated`` authenticates, then the key is revoked (as if by another
    request while this one went on to wait for its lock)."""
    real = module.authenticated
    revoked: list[bool] = []

    def then_revoked(db_: Database, caller: Caller, *args: Any) -> Principal:
        principal: Principal = real(db_, caller, *args)
        if not revoked:  # once (revoke_key itself authenticates through keys.authenticated)
            revoked.append(True)
            keys.revoke_key(db, SYSTEM, key_id)
        return principal

    monkeypatch.setattr(module, "authenticated", then_revoked)


def test_a_charge_authenticated_before_its_key_was_revoked_records_nothing(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    ds = new_dataset(client, "alpha", budget={"epsilon": 10.0, "delta": 1e-6})
    pipe = _mint(client, {"role": "pipeline"})
    _revoked_right_after_authentication(monkeypatch, charges, _db(client), pipe["id"])
    r = client.post(f"/v1/datasets/{ds['id']}/charges", json=GAUSS, headers=_bearer(pipe["key"]))
    assert r.status_code == 401, r.text
    assert "revoked" in r.json()["detail"]
    assert client.get(f"/v1/datasets/{ds['id']}/budget").json()["entries"] == 0


def test_a_hold_authenticated_before_its_key_was_revoked_is_not_made(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    ds = new_dataset(client, "alpha", budget={"epsilon": 10.0, "delta": 1e-6})
    pipe = _mint(client, {"role": "pipeline"})
    _revoked_right_after_authentication(monkeypatch, reservations, _db(client), pipe["id"])
    r = client.post(
        f"/v1/datasets/{ds['id']}/reservations",
        json={**GAUSS, "ttl_seconds": 600},
        headers=_bearer(pipe["key"]),
    )
    assert r.status_code == 401, r.text
    listed = client.get(f"/v1/datasets/{ds['id']}/reservations", params={"status": "all"})
    assert listed.json()["total"] == 0


def test_a_budget_change_by_a_key_revoked_while_it_waited_is_refused(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    ds = new_dataset(client, "alpha", budget={"epsilon": 1.0, "delta": 1e-6})
    scoped = _mint(client, {"role": "admin", "datasets": [ds["id"]]})
    _revoked_right_after_authentication(monkeypatch, datasets, _db(client), scoped["id"])
    r = client.patch(
        f"/v1/datasets/{ds['id']}",
        json={"budget": {"epsilon": 100.0, "delta": 1e-6}},
        headers=_bearer(scoped["key"]),
    )
    assert r.status_code == 401, r.text
    assert client.get(f"/v1/datasets/{ds['id']}").json()["budget"]["epsilon"] == 1.0
    events = client.get("/v1/audit", params={"action": "budget.raised"}).json()["events"]
    assert events == []


def test_a_key_minted_by_a_key_revoked_while_it_waited_is_not_made(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    admin2 = _mint(client, {"role": "admin"})
    _revoked_right_after_authentication(monkeypatch, keys, _db(client), admin2["id"])
    before = {k["id"] for k in client.get("/v1/keys").json()["keys"]}
    r = client.post("/v1/keys", json={"role": "pipeline"}, headers=_bearer(admin2["key"]))
    assert r.status_code == 401, r.text
    monkeypatch.undo()
    assert {k["id"] for k in client.get("/v1/keys").json()["keys"]} == before


def test_writes_confirm_their_key_only_after_a_recent_revocation(
    client: TestClient, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The steady charge path reads no key row under the lock: the last revocation's time comes
    with the lock, and only one within ``REVOCATION_SKEW`` of the key's check costs a look-up."""
    ds = new_dataset(client, "alpha", budget={"epsilon": 10.0, "delta": 1e-6})
    pipe = _bearer(_mint(client, {"role": "pipeline"})["key"])
    looked_up: list[str | None] = []
    real = auth.confirm_active

    def counting(session: Any, principal: Principal) -> None:
        looked_up.append(principal.key_id)
        real(session, principal)

    monkeypatch.setattr(auth, "confirm_active", counting)

    def charge() -> None:
        r = client.post(f"/v1/datasets/{ds['id']}/charges", json=GAUSS, headers=pipe)
        assert r.status_code == 201, r.text

    charge()  # no key was ever revoked
    assert looked_up == []
    doomed = _mint(client, {"role": "viewer"})
    assert client.delete(f"/v1/keys/{doomed['id']}").status_code == 200
    charge()  # a revocation just now: the charge's key is confirmed
    assert len(looked_up) == 1
    run_sql(
        db_url,
        "UPDATE app_setting SET value = :v WHERE key = :k",
        v="2020-01-01T00:00:00+00:00",
        k=auth.KEYS_REVOKED_AT,
    )
    charge()  # the last revocation long before the key was read: no look-up
    assert len(looked_up) == 1


def test_revoking_a_revoked_or_unknown_key_leaves_the_last_revocation_time(
    client: TestClient, db_url: str
) -> None:
    """Only a revocation that happens moves ``KEYS_REVOKED_AT``: a repeated (idempotent) revoke
    or one of an unknown key used to move it too, and every write in flight then confirmed its
    key again under its lock for nothing."""
    doomed = _mint(client, {"role": "viewer"})
    assert client.delete(f"/v1/keys/{doomed['id']}").status_code == 200
    old = "2020-01-01T00:00:00+00:00"

    def last_revocation() -> Any:
        rows = run_sql(
            db_url, "SELECT value FROM app_setting WHERE key = :k", k=auth.KEYS_REVOKED_AT
        )
        return rows[0][0]

    assert last_revocation() != old  # the revocation recorded its time
    run_sql(
        db_url, "UPDATE app_setting SET value = :v WHERE key = :k", v=old, k=auth.KEYS_REVOKED_AT
    )
    again = client.delete(f"/v1/keys/{doomed['id']}")
    assert again.status_code == 200 and again.json()["revoked_at"] is not None, again.text
    assert client.delete("/v1/keys/no-such-key").status_code == 404
    assert last_revocation() == old
    fresh = _mint(client, {"role": "viewer"})
    assert client.delete(f"/v1/keys/{fresh['id']}").status_code == 200
    assert datetime.fromisoformat(last_revocation()) > datetime.fromisoformat(old)


def test_only_the_holding_key_or_an_admin_releases_a_hold(client: TestClient) -> None:
    ds = new_dataset(client, "alpha", budget={"epsilon": 10.0, "delta": 1e-6})
    owner = _mint(client, {"role": "pipeline", "datasets": [ds["id"]]})
    other = _mint(client, {"role": "pipeline", "datasets": [ds["id"]]})

    def hold() -> str:
        r = client.post(
            f"/v1/datasets/{ds['id']}/reservations",
            json={**GAUSS, "ttl_seconds": 600},
            headers=_bearer(owner["key"]),
        )
        assert r.status_code == 201, r.text
        return str(r.json()["id"])

    first = hold()
    r = client.delete(f"/v1/reservations/{first}", headers=_bearer(other["key"]))
    assert r.status_code == 403, r.text
    assert "another key" in r.json()["detail"]
    assert client.get(f"/v1/reservations/{first}").json()["status"] == "active"
    # committing another key's hold charges it: allowed, and says who did it
    r = client.post(f"/v1/reservations/{first}/commit", headers=_bearer(other["key"]))
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "committed" and r.json()["resolved_by"] == other["id"]

    second = hold()
    r = client.delete(f"/v1/reservations/{second}", headers=_bearer(owner["key"]))
    assert r.status_code == 200 and r.json()["resolved_by"] == owner["id"], r.text
    events = client.get("/v1/audit", params={"action": "reservation.released"}).json()["events"]
    assert events == []  # a key releasing its own hold is the normal path

    third = hold()
    r = client.delete(f"/v1/reservations/{third}")  # the unscoped admin
    assert r.status_code == 200, r.text
    admin_id = auth.authenticated(_db(client), Credentials(ADMIN_KEY, Role.ADMIN)).key_id
    assert r.json()["resolved_by"] == admin_id
    events = client.get("/v1/audit", params={"action": "reservation.released"}).json()["events"]
    assert [(e["target_id"], e["details"]["held_by"]) for e in events] == [(third, owner["id"])]


def test_a_scoped_admin_cannot_take_the_label_of_a_key_outside_its_scope(
    client: TestClient,
) -> None:
    a = new_dataset(client, "alpha")
    everywhere = _mint(client, {"role": "pipeline", "label": "etl-prod"})
    scoped = _bearer(_mint(client, {"role": "admin", "datasets": [a["id"]]})["key"])
    r = client.post(
        "/v1/keys",
        json={"role": "pipeline", "datasets": [a["id"]], "label": "etl-prod"},
        headers=scoped,
    )
    assert r.status_code == 409, r.text
    assert r.json()["label"] == "etl-prod"
    # labels within the scoped admin's reach may repeat (a rotation), and an unscoped admin
    # reaches every key
    _mint(client, {"role": "pipeline", "datasets": [a["id"]], "label": "etl-a"}, headers=scoped)
    _mint(client, {"role": "pipeline", "datasets": [a["id"]], "label": "etl-a"}, headers=scoped)
    _mint(client, {"role": "pipeline", "label": "etl-prod"})
    # nor one that reads the same (spaces, case), nor the label of a revoked key outside its
    # reach: that key's entries keep their label
    for lookalike in ("etl-prod ", "ETL-Prod", " etl-prod"):
        body = {"role": "pipeline", "datasets": [a["id"]], "label": lookalike}
        assert client.post("/v1/keys", json=body, headers=scoped).status_code == 409
    for k in client.get("/v1/keys").json()["keys"]:
        if k["label"] == "etl-prod":
            assert client.delete(f"/v1/keys/{k['id']}").status_code == 200
    assert everywhere["id"]
    body = {"role": "pipeline", "datasets": [a["id"]], "label": "etl-prod"}
    assert client.post("/v1/keys", json=body, headers=scoped).status_code == 409


def test_the_openapi_document_declares_the_409_of_a_label_taken_outside_the_scope(
    sqlite_client: TestClient,
) -> None:
    """The 409 above was answered but not declared: /docs and /redoc listed 201, 400, 401,
    403, 413, 422 and 503 for ``POST /v1/keys``, so a client generated from the document (or a
    reader of the offline API pages) had no 409 to expect."""
    post = sqlite_client.get("/openapi.json").json()["paths"]["/v1/keys"]["post"]
    assert "409" in post["responses"]


@pytest.mark.parametrize(
    "lookalike",
    [
        "etl-prod\u200b",  # zero-width space
        "\ufeffetl-prod",  # zero-width no-break space (BOM)
        "etl\u00ad-prod",  # soft hyphen
        "etl-\u2060prod",  # word joiner
        "\u202detl-prod",  # left-to-right override
        "etl-prod\x7f",  # DEL (a control character)
        "\uff45\uff54\uff4c-prod",  # fullwidth letters
    ],
    ids=["zwsp", "bom", "soft-hyphen", "word-joiner", "lro", "del", "fullwidth"],
)
def test_a_label_with_invisible_or_compatibility_characters_reads_as_the_label(
    client: TestClient, lookalike: str
) -> None:
    """Characters that a page does not show (format and control characters) or shows as the
    plain letter (compatibility forms) made a label that read as another key's pass the check
    above: ``"etl-prod\u200b"`` is shown as ``etl-prod`` on the ledger and the dashboard."""
    a = new_dataset(client, "alpha")
    _mint(client, {"role": "pipeline", "label": "etl-prod"})
    scoped = _bearer(_mint(client, {"role": "admin", "datasets": [a["id"]]})["key"])
    before = {k["id"] for k in client.get("/v1/keys").json()["keys"]}
    body = {"role": "pipeline", "datasets": [a["id"]], "label": lookalike}
    r = client.post("/v1/keys", json=body, headers=scoped)
    assert r.status_code == 409, r.text
    assert {k["id"] for k in client.get("/v1/keys").json()["keys"]} == before


@pytest.mark.parametrize(
    "call",
    [
        lambda c, ds: c.get(f"/v1/datasets/{ds}/spend"),
        lambda c, ds: c.get(f"/v1/datasets/{ds}/reservations", params={"status": "bogus"}),
        lambda c, ds: c.post(
            f"/v1/datasets/{ds}/reservations", json={**GAUSS, "ttl_seconds": 10**9}
        ),
    ],
    ids=["spend-without-a-query", "reservations-bad-status", "reserve-bad-ttl"],
)
def test_an_unknown_key_gets_401_before_any_input_check(
    client: TestClient, call: Callable[[TestClient, str], Any]
) -> None:
    ds = new_dataset(client, "alpha")
    client.headers.update(_bearer("pl_p_" + "unknown" * 7))
    for ref in (ds["id"], "no-such-dataset"):
        r = call(client, ref)
        assert r.status_code == 401, r.text
    client.headers.update(ADMIN)
    assert call(client, ds["id"]).status_code == 422


def test_the_gate_looks_up_keys_read_before_a_recent_revocation_only() -> None:
    read = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)
    p = Principal(key_id="key_x", role=Role.PIPELINE, checked_at=read)
    assert not auth.may_be_revoked(p, None)  # never any revocation
    assert auth.may_be_revoked(p, (read + timedelta(seconds=1)).isoformat())
    # within the clock skew allowed between replicas, before the read: still looked up
    assert auth.may_be_revoked(p, (read - auth.REVOCATION_SKEW).isoformat())
    assert not auth.may_be_revoked(p, (read - auth.REVOCATION_SKEW * 2).isoformat())
    # principals trusted as given (SYSTEM, CLI commands on the server) never are
    assert not auth.may_be_revoked(SYSTEM, "2999-01-01T00:00:00+00:00")
