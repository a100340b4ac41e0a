"""/metrics counters move with admitted and refused charges; JSON logs carry request ids and no
secrets; database failures are counted and answered 503."""

from __future__ import annotations

import json
import logging
import re
import sqlite3
from typing import Any

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from app import observability
from app.main import create_app
from tests.conftest import ADMIN, ADMIN_KEY, make_settings, new_dataset

LAPLACE = {"mechanism": "laplace", "epsilon": 0.3}


def scrape(client: TestClient) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    r = client.get("/metrics")  # public: no key
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain")
    out = {}
    for family in text_string_to_metric_families(r.text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def sample(
    m: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str
) -> float:
    return m.get((name, frozenset(labels.items())), 0.0)


def test_charge_counters_move_with_admitted_and_refused(client: TestClient) -> None:
    ds = new_dataset(client)  # budget epsilon 1
    url = f"/v1/datasets/{ds['id']}/charges"
    labels = {"dataset": ds["id"], "mechanism": "laplace"}
    before = scrape(client)
    assert client.post(url, json={"mechanism": LAPLACE}).status_code == 201
    assert client.post(url, json={"mechanism": LAPLACE}).status_code == 201
    # a dry run and an idempotent replay decide nothing new
    assert client.post(url + "?dry_run=true", json={"mechanism": LAPLACE}).status_code == 200
    idem = {**ADMIN, "Idempotency-Key": "k-1"}
    assert client.post(url, json={"mechanism": LAPLACE}, headers=idem).status_code == 201
    assert client.post(url, json={"mechanism": LAPLACE}, headers=idem).status_code == 201
    # 0.9 spent: the fourth 0.3 does not fit
    assert client.post(url, json={"mechanism": LAPLACE}).status_code == 409
    after = scrape(client)
    name = "privacy_ledger_charges_total"
    assert (
        sample(after, name, **labels, outcome="admitted")
        - sample(before, name, **labels, outcome="admitted")
        == 3
    )
    assert (
        sample(after, name, **labels, outcome="refused")
        - sample(before, name, **labels, outcome="refused")
        == 1
    )
    # the latency histogram is labelled by route template, not by raw path
    h = "privacy_ledger_http_request_duration_seconds_count"
    route = "/v1/datasets/{dataset_id}/charges"
    moved = sample(after, h, method="POST", route=route, status="201") - sample(
        before, h, method="POST", route=route, status="201"
    )
    assert moved == 4  # three charges and the replay answer 201 (the dry run 200)
    assert not any(ds["id"] in dict(k[1]).get("route", "") for k in after)


def test_reservation_counters(client: TestClient) -> None:
    ds = new_dataset(client)
    base = f"/v1/datasets/{ds['id']}/reservations"
    labels = {"dataset": ds["id"], "mechanism": "laplace"}
    before = scrape(client)
    r1 = client.post(base, json={"mechanism": LAPLACE, "ttl_seconds": 60}).json()
    r2 = client.post(base, json={"mechanism": LAPLACE, "ttl_seconds": 60}).json()
    assert client.post(f"/v1/reservations/{r1['id']}/commit").status_code == 200
    assert client.delete(f"/v1/reservations/{r2['id']}").status_code == 200
    big = {"mechanism": "laplace", "epsilon": 0.9}
    assert client.post(base, json={"mechanism": big, "ttl_seconds": 60}).status_code == 409
    after = scrape(client)
    name = "privacy_ledger_reservations_total"
    for outcome, n in {"reserved": 2, "committed": 1, "released": 1, "refused": 1}.items():
        moved = sample(after, name, **labels, outcome=outcome) - sample(
            before, name, **labels, outcome=outcome
        )
        assert moved == n, outcome


def test_database_failure_is_503_and_counted(sqlite_url: str) -> None:
    app = create_app(make_settings(sqlite_url))
    with TestClient(app) as c:
        before = scrape(c)
        # the totals table disappears under the running service: its queries now fail
        with sqlite3.connect(sqlite_url.removeprefix("sqlite:///")) as conn:
            conn.execute("PRAGMA foreign_keys=OFF")
            conn.execute("DROP TABLE dataset_total")
        r = c.get("/v1/datasets", headers=ADMIN)
        assert r.status_code == 503
        assert r.headers["content-type"].startswith("application/problem+json")
        assert r.headers["retry-after"] == "1"
        assert r.json()["title"] == "Database unavailable"
        after = scrape(c)
    name = "privacy_ledger_db_errors_total"
    moved = sum(
        v - before.get(k, 0.0) for k, v in after.items() if k[0] == name and v != before.get(k)
    )
    assert moved >= 1


def _json_lines(text: str) -> list[dict[str, Any]]:
    out = []
    for line in text.splitlines():
        if line.startswith("{"):
            out.append(json.loads(line))
    return out


def test_json_logs_carry_request_id_and_no_secret(
    db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    app = create_app(make_settings(db_url))
    with TestClient(app, headers=ADMIN) as c:
        key = c.post("/v1/keys", json={"role": "pipeline"}).json()["key"]
        ds = new_dataset(c)
        r = c.post(
            f"/v1/datasets/{ds['id']}/charges",
            json={"mechanism": LAPLACE},
            headers={"Authorization": f"Bearer {key}", "X-Request-ID": "job-42.step:7"},
        )
        assert r.status_code == 201
        assert r.headers["x-request-id"] == "job-42.step:7"
        generated = c.get("/healthz").headers["x-request-id"]
        assert re.fullmatch(r"[0-9a-f]{32}", generated)
        # a malformed id (spaces, too long) is replaced, not echoed
        bad = c.get("/healthz", headers={"X-Request-ID": "x y " * 50}).headers["x-request-id"]
        assert re.fullmatch(r"[0-9a-f]{32}", bad)
        assert c.get("/v1/datasets", headers={"Authorization": f"Bearer {key}x"}).status_code == 401
    err = capsys.readouterr().err
    records = _json_lines(err)
    access = [x for x in records if x["logger"] == "privacy_ledger.access"]
    [charge] = [x for x in access if x.get("request_id") == "job-42.step:7"]
    assert charge["route"] == "/v1/datasets/{dataset_id}/charges"
    assert charge["status"] == 201 and charge["method"] == "POST"
    assert charge["duration_ms"] > 0 and charge["level"] == "info"
    assert any(x.get("request_id") == generated for x in access)
    # every record is one JSON object; no key (admin or pipeline), whole or in part, appears
    assert len(records) == len([ln for ln in err.splitlines() if ln.strip()])
    for secret in (key, key[8:], ADMIN["Authorization"].split()[1]):
        assert secret not in err


@pytest.mark.parametrize("log_json", [True, False])
def test_the_operator_key_is_masked_in_logs_wherever_it_is_sent(
    sqlite_url: str, capsys: pytest.CaptureFixture[str], log_json: bool
) -> None:
    """``PRIVACY_LEDGER_ADMIN_KEY`` may be any string of 32 characters or more, not shaped like
    a generated key (``pl_...``), which is all the masks knew: sent where an id goes (``keys
    revoke <the secret>`` instead of its id), it was written to the access log's path in
    clear (authz46)."""
    assert not ADMIN_KEY.startswith("pl_")
    with TestClient(create_app(make_settings(sqlite_url, log_json=log_json)), headers=ADMIN) as c:
        assert c.delete(f"/v1/keys/{ADMIN_KEY}").status_code == 404
        assert c.get(f"/v1/datasets/{ADMIN_KEY}/budget").status_code == 404
        assert c.get("/v1/datasets", params={"key": ADMIN_KEY}).status_code == 200
    err = capsys.readouterr().err
    assert "/v1/keys/" in err  # the requests were logged
    assert ADMIN_KEY not in err and ADMIN_KEY[4:-4] not in err


def test_unhandled_error_is_logged_with_its_request_id(
    sqlite_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    app = create_app(make_settings(sqlite_url))

    @app.get("/boom")
    def boom() -> None:
        raise RuntimeError("kaboom")

    with TestClient(app) as c:
        r = c.get("/boom", headers={"X-Request-ID": "trace-boom"})
    assert r.status_code == 500
    assert r.headers["x-request-id"] == "trace-boom"
    assert r.json()["status"] == 500
    records = _json_lines(capsys.readouterr().err)
    [error] = [x for x in records if x["level"] == "error" and x.get("request_id") == "trace-boom"]
    assert "kaboom" in error["exc"]


def test_scrub_masks_keys_bearer_tokens_and_url_passwords() -> None:
    text = (
        "key pl_a_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789 header Bearer s3cr3t-token "
        "url postgresql+psycopg://app:hunter2@db:5432/ledger"
    )
    out = observability.scrub(text)
    assert "AbCdEfGhIjKlMnOp" not in out and "s3cr3t-token" not in out
    assert "hunter2" not in out and "postgresql+psycopg://app:***@db:5432/ledger" in out


def test_library_records_are_json_lines_with_secrets_masked(
    sqlite_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """psycopg's and SQLAlchemy's records went to Python's last-resort handler: plain text
    among the JSON lines, a URL's password unmasked (stop 32 operations audit)."""
    create_app(make_settings(sqlite_url))  # configures logging
    capsys.readouterr()
    logging.getLogger("psycopg").warning("Exception during reset, url postgresql://u:secretpw@h/db")
    logging.getLogger("sqlalchemy.pool.impl.QueuePool").error("error ignored terminating")
    err = capsys.readouterr().err
    records = _json_lines(err)
    assert len(records) == len([ln for ln in err.splitlines() if ln.strip()]) == 2
    assert [r["logger"] for r in records] == ["psycopg", "sqlalchemy.pool.impl.QueuePool"]
    assert "secretpw" not in err and "postgresql://u:***@h/db" in records[0]["msg"]
