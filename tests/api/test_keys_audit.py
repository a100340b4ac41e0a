"""Keys never in clear; every budget and key change audited; rejections kept and filterable."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import LargeBinary, String, Text, create_engine, inspect, select, text

from app.config import Settings
from app.db.models import Base
from app.errors import Forbidden
from app.main import create_app
from tests.conftest import ADMIN, expire_active_holds, make_settings, new_dataset


def _all_stored_text(db_url: str) -> str:
    """Every string, JSON and blob column of every table, concatenated."""
    engine = create_engine(db_url)
    out = []
    try:
        with engine.connect() as conn:
            for table in Base.metadata.sorted_tables:
                cols = [
                    c
                    for c in table.columns
                    if isinstance(c.type, String | Text | LargeBinary)
                    or c.type.__class__.__name__ == "JSON"
                ]
                for row in conn.execute(select(*cols)):
                    out.extend(str(v) for v in row)
            assert set(inspect(conn).get_table_names()) >= set(Base.metadata.tables)
    finally:
        engine.dispose()
    return "\n".join(out)


def test_keys_never_stored_shown_or_logged_in_clear(
    client: TestClient, db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    created = client.post("/v1/keys", json={"role": "pipeline", "label": "etl"}).json()
    key = created["key"]
    assert key.startswith("pl_p_") and len(key) > 40
    ds = new_dataset(client)
    me = {"Authorization": f"Bearer {key}"}
    assert (
        client.post(
            f"/v1/datasets/{ds['id']}/charges",
            json={"mechanism": {"mechanism": "laplace", "epsilon": 0.1}},
            headers=me,
        ).status_code
        == 201
    )
    assert (
        client.get(
            "/v1/datasets", headers={"Authorization": "Bearer pl_p_wrong-key-value"}
        ).status_code
        == 401
    )
    stored = _all_stored_text(db_url)
    assert key not in stored and key[8:] not in stored
    assert "pl_p_wrong-key-value" not in stored
    listed = (
        client.get("/v1/keys").text
        + client.get("/v1/audit").text
        + client.get(f"/v1/datasets/{ds['id']}/ledger").text
    )
    assert key not in listed and key[8:] not in listed
    assert caplog.records  # the requests above were logged (access lines), and checked here
    logged = "\n".join(r.getMessage() for r in caplog.records) + caplog.text
    assert key not in logged and "pl_p_wrong-key-value" not in logged
    [row] = [k for k in client.get("/v1/keys").json()["keys"] if k["id"] == created["id"]]
    assert "key" not in row and "prefix" not in row
    assert not any(key[:8] in str(v) for v in row.values())


def test_revoked_key_is_401_and_last_admin_cannot_be_revoked(client: TestClient) -> None:
    k = client.post("/v1/keys", json={"role": "viewer"}).json()
    assert (
        client.get("/v1/datasets", headers={"Authorization": f"Bearer {k['key']}"}).status_code
        == 200
    )
    assert client.delete(f"/v1/keys/{k['id']}").json()["revoked"] is True
    assert client.delete(f"/v1/keys/{k['id']}").status_code == 200  # idempotent
    r = client.get("/v1/datasets", headers={"Authorization": f"Bearer {k['key']}"})
    assert r.status_code == 401 and "revoked" in r.json()["detail"]
    admins = [
        x
        for x in client.get("/v1/keys").json()["keys"]
        if x["role"] == "admin" and not x["revoked"]
    ]
    assert len(admins) == 1
    assert client.delete(f"/v1/keys/{admins[0]['id']}").status_code == 403
    assert client.delete("/v1/keys/key_missing").status_code == 404


def test_a_revoked_operator_key_is_not_revived_by_a_restart(db_url: str) -> None:
    """``PRIVACY_LEDGER_ADMIN_KEY`` ensures an admin key with its value at start-up; once an
    admin has revoked that key, a restart with the same value must not make it work again (nor
    mint a new row for it): the server refuses to start, naming the setting (authz46)."""
    with TestClient(create_app(make_settings(db_url)), headers=ADMIN) as c:
        other = c.post("/v1/keys", json={"role": "admin"}).json()
        env = next(k for k in c.get("/v1/keys").json()["keys"] if k["created_by"] is None)
        me = {"Authorization": f"Bearer {other['key']}"}
        assert c.delete(f"/v1/keys/{env['id']}", headers=me).status_code == 200
    with pytest.raises(Forbidden, match="PRIVACY_LEDGER_ADMIN_KEY matches a revoked"):
        with TestClient(create_app(make_settings(db_url))):
            pass
    unset = Settings(database_url=db_url, admin_key=None, auto_migrate=False)
    with TestClient(create_app(unset)) as c:
        assert c.get("/v1/datasets", headers=ADMIN).status_code == 401
        listed = c.get("/v1/keys", headers={"Authorization": f"Bearer {other['key']}"}).json()
        assert [k["revoked"] for k in listed["keys"] if k["created_by"] is None] == [True]


def test_key_scope_must_name_existing_datasets(client: TestClient) -> None:
    r = client.post("/v1/keys", json={"role": "pipeline", "datasets": ["ds_nope"]})
    assert r.status_code == 422 and r.json()["unknown"] == ["ds_nope"]


def _events(client: TestClient, **params) -> list[dict]:
    return client.get("/v1/audit", params=params).json()["events"]


def test_audit_trail_records_every_change_with_old_and_new(client: TestClient) -> None:
    ds = new_dataset(client, budget={"epsilon": 1.0, "delta": 1e-6}, adaptive=False)
    url = f"/v1/datasets/{ds['id']}"
    client.post(f"{url}/charges", json={"mechanism": {"mechanism": "laplace", "epsilon": 0.5}})
    client.patch(url, json={"budget": {"epsilon": 2.0}})
    client.patch(url, json={"budget": {"epsilon": 0.3}})
    client.patch(url, json={"description": "quarterly release"})
    k = client.post("/v1/keys", json={"role": "viewer"}).json()
    client.delete(f"/v1/keys/{k['id']}")
    client.post("/v1/admin/verify", params={"rebuild": True})

    events = _events(client, dataset=ds["id"])
    by_action: dict[str, list[dict]] = {}
    for e in events:
        by_action.setdefault(e["action"], []).append(e)
    assert by_action["dataset.created"][0]["details"]["budget"] == {"epsilon": 1.0, "delta": 1e-6}
    raised = by_action["budget.raised"][0]["details"]["changes"]["budget"]
    assert raised == {
        "old": {"epsilon": 1.0, "delta": 1e-6},
        "new": {"epsilon": 2.0, "delta": 1e-6},
    }
    lowered = by_action["budget.lowered"][0]["details"]["changes"]["budget"]
    assert lowered["new"]["epsilon"] == 0.3
    assert by_action["dataset.changed"][0]["details"]["changes"]["description"] == {
        "old": None,
        "new": "quarterly release",
    }
    admin_key_id = next(
        x["id"] for x in client.get("/v1/keys").json()["keys"] if x["role"] == "admin"
    )
    assert all(e["key_id"] == admin_key_id for e in events)
    # lowering below the spend leaves the dataset exhausted
    assert client.get(url).json()["exhausted"] is True
    key_events = {e["action"]: e for e in _events(client) if e["target_id"] == k["id"]}
    assert key_events["key.created"]["details"]["role"] == "viewer"
    assert "key.revoked" in key_events
    # the dataset may be named, as on every dataset route (a name was an empty answer)
    assert _events(client, dataset=ds["name"]) == events
    assert _events(client, dataset="no-such-dataset") == []
    # the audit trail is append-only: no route changes or deletes it
    assert client.delete("/v1/audit").status_code == 405
    assert client.patch("/v1/audit").status_code == 405


def test_reservation_expiry_and_rebuild_are_audited(client: TestClient, db_url: str) -> None:
    ds = new_dataset(client)
    r = client.post(
        f"/v1/datasets/{ds['id']}/reservations",
        json={"mechanism": {"mechanism": "laplace", "epsilon": 0.1}, "ttl_seconds": 60},
    ).json()
    expire_active_holds(db_url)  # let the reservation expire
    engine = create_engine(db_url)
    try:
        with engine.begin() as conn:
            conn.execute(text("UPDATE dataset_total SET rho = rho + 1"))  # make totals drift
    finally:
        engine.dispose()
    charge = client.post(
        f"/v1/datasets/{ds['id']}/charges",
        json={"mechanism": {"mechanism": "laplace", "epsilon": 0.1}},
    )
    assert charge.status_code == 201
    expired = _events(client, action="reservation.expired")
    assert [e["target_id"] for e in expired] == [r["id"]]
    report = client.post("/v1/admin/verify").json()
    assert report["ok"] is False and "rho" in report["datasets"][0]["drift"]
    assert (
        client.post("/v1/admin/verify", params={"rebuild": True}).json()["datasets"][0]["rebuilt"]
        is True
    )
    assert client.post("/v1/admin/verify").json()["ok"] is True
    rebuilt = _events(client, action="totals.rebuilt")
    assert rebuilt and rebuilt[0]["details"]["drift"] == ["rho"]


def test_rejections_filter_by_dataset_and_time(client: TestClient) -> None:
    a, b = new_dataset(client, "a"), new_dataset(client, "b")
    big = {"mechanism": {"mechanism": "laplace", "epsilon": 50.0}}
    for ds in (a, b, a):
        assert client.post(f"/v1/datasets/{ds['id']}/charges", json=big).status_code == 409
    assert client.post(f"/v1/datasets/{b['id']}/reservations", json=big).status_code == 409
    everything = client.get("/v1/rejections").json()["rejections"]
    assert len(everything) == 4
    assert [
        r["operation"]
        for r in client.get("/v1/rejections", params={"dataset": b["id"]}).json()["rejections"]
    ] == ["reservation", "charge"]
    first = everything[-1]
    assert (
        first["spent"]["epsilon"] == 0.0
        and first["requested"]["mechanism"]["epsilon"] == 50.0
        and first["reason"]
    )
    future = (datetime.now(UTC) + timedelta(minutes=5)).isoformat()
    assert client.get("/v1/rejections", params={"since": future}).json()["rejections"] == []
    assert len(client.get("/v1/rejections", params={"until": future}).json()["rejections"]) == 4
    page = client.get("/v1/rejections", params={"limit": 3}).json()
    rest = client.get("/v1/rejections", params={"limit": 3, "cursor": page["next_cursor"]}).json()
    assert (
        len(page["rejections"]) == 3
        and len(rest["rejections"]) == 1
        and rest["next_cursor"] is None
    )


@pytest.mark.parametrize(
    ("method", "path", "kwargs"),
    [
        ("GET", "/v1/audit", {"params": {"limit": 5000}}),
        ("GET", "/v1/rejections", {"params": {"limit": 0}}),
        ("GET", "/v1/datasets", {"params": {"limit": 100000}}),
        (
            "POST",
            "/v1/accounting/compose",
            {
                "json": {
                    "mechanisms": [{"mechanism": "laplace", "epsilon": 0.1}] * 10001,
                    "delta": 1e-6,
                }
            },
        ),
        ("POST", "/v1/keys", {"json": {"role": "viewer", "label": "x" * 500}}),
        ("POST", "/v1/keys", {"json": {"role": "root"}}),
        (
            "POST",
            "/v1/datasets",
            {"json": {"name": "x" * 300, "budget": {"epsilon": 1, "delta": 1e-6}}},
        ),
        (
            "POST",
            "/v1/datasets",
            {"json": {"name": "bad/../name\n", "budget": {"epsilon": 1, "delta": 1e-6}}},
        ),
    ],
)
def test_limits_are_4xx_with_detail(
    client: TestClient, method: str, path: str, kwargs: dict
) -> None:
    r = client.request(method, path, **kwargs)
    assert 400 <= r.status_code < 500 and r.json()["detail"], r.text[:200]


def test_idempotency_key_length_limit(client: TestClient) -> None:
    ds = new_dataset(client)
    r = client.post(
        f"/v1/datasets/{ds['id']}/charges",
        json={"mechanism": {"mechanism": "laplace", "epsilon": 0.1}},
        headers={"Idempotency-Key": "k" * 500},
    )
    assert r.status_code == 422
    assert client.get(f"/v1/datasets/{ds['id']}/budget").json()["entries"] == 0
