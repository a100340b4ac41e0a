"""A server started without migrating (``PRIVACY_LEDGER_AUTO_MIGRATE=false``, the migration job
not yet run) on a database at an older revision answered ``/readyz`` 200 "ready" while every
request failed on the columns the older schema lacks: a load balancer sent it traffic. Readiness
now says which revision the schema is at and that ``migrate`` is needed; after it, ready."""

from __future__ import annotations

from fastapi.testclient import TestClient

from app.accounting.orders import CURVE_FORMULAS_VERSION
from app.db import migrate
from app.db.engine import Database
from app.main import create_app
from app.services.verification import FORMULAS_SETTING, rederive_if_formulas_changed
from tests.conftest import ADMIN, make_settings, new_dataset, run_sql


def test_readyz_is_503_until_an_old_schema_is_migrated(db_url: str) -> None:
    migrate.downgrade(db_url, "0008")  # an empty database: no force needed
    try:
        app = create_app(make_settings(db_url))
        with TestClient(app, raise_server_exceptions=False, headers=ADMIN) as c:
            ready = c.get("/readyz")
            assert ready.status_code == 503, ready.text
            assert "0008" in ready.json()["detail"] and "migrate" in ready.json()["detail"]
            # what readiness stands for: the requests it would be sent do not work yet (0010
            # added a dataset column, so even creating one fails)
            created = c.post(
                "/v1/datasets", json={"name": "census", "budget": {"epsilon": 1, "delta": 1e-5}}
            )
            assert created.status_code >= 500
    finally:
        migrate.upgrade(db_url)
    with TestClient(create_app(make_settings(db_url))) as c:
        assert c.get("/readyz").status_code == 200


def test_readyz_is_503_while_the_ledger_s_curves_predate_this_release_s_formulas(
    db_url: str,
) -> None:
    """With auto-migration off, start-up does not re-derive curves stored under formulas a
    release has since corrected (``CURVE_FORMULAS_VERSION``): the server used to answer ready
    and admit charges on totals that could be below what the ledger's mechanisms imply.
    Readiness now names the stamp and ``migrate``. A database that stores no curve yet is
    stamped at start-up (nothing to re-derive): its own charges keep it ready."""
    settings = make_settings(db_url)  # auto-migration off, schema migrated by plain upgrade

    def set_stamp(value: str | None) -> None:
        run_sql(db_url, "DELETE FROM app_setting WHERE key = :k", k=FORMULAS_SETTING)
        if value is not None:
            run_sql(
                db_url,
                "INSERT INTO app_setting (key, value) VALUES (:k, :v)",
                k=FORMULAS_SETTING,
                v=value,
            )

    with TestClient(create_app(settings), raise_server_exceptions=False, headers=ADMIN) as c:
        ds = new_dataset(c)
        charge = c.post(
            f"/v1/datasets/{ds['id']}/charges",
            json={"mechanism": {"mechanism": "laplace", "epsilon": 0.1}},
        )
        assert charge.status_code == 201, charge.text
        assert c.get("/readyz").status_code == 200  # stamped when it started empty
        set_stamp(None)  # as written by a release before the stamp, then plainly migrated
        ready = c.get("/readyz")
        assert ready.status_code == 503, ready.text
        detail = ready.json()["detail"]
        assert "unknown" in detail and "privacy-ledger migrate" in detail, detail
        db: Database = c.app.state.db  # type: ignore[attr-defined]
        assert rederive_if_formulas_changed(db) is not None  # what `migrate` runs
        assert c.get("/readyz").status_code == 200
        set_stamp(str(CURVE_FORMULAS_VERSION - 1))
        older = c.get("/readyz")
        assert older.status_code == 503, older.text
        assert f"version {CURVE_FORMULAS_VERSION - 1}," in older.json()["detail"]
        set_stamp(str(CURVE_FORMULAS_VERSION + 1))  # a newer release migrated: as a schema
        assert c.get("/readyz").status_code == 200
    set_stamp(None)
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        assert c.get("/readyz").status_code == 503  # a start does not stamp a ledger with curves


def test_an_active_hold_alone_counts_as_stored_curves(db_url: str) -> None:
    """A hold stores its mechanism's curve too: a database with a hold and no entry is not
    stamped at start-up, and is unready without a stamp."""
    with TestClient(create_app(make_settings(db_url)), headers=ADMIN) as c:
        ds = new_dataset(c)
        hold = c.post(
            f"/v1/datasets/{ds['id']}/reservations",
            json={"mechanism": {"mechanism": "laplace", "epsilon": 0.1}},
        )
        assert hold.status_code == 201, hold.text
        run_sql(db_url, "DELETE FROM app_setting WHERE key = :k", k=FORMULAS_SETTING)
        assert c.get("/readyz").status_code == 503
    with TestClient(create_app(make_settings(db_url))) as c:
        assert c.get("/readyz").status_code == 503  # started again: still not stamped


def test_no_charge_or_hold_is_admitted_while_the_ledger_s_curves_predate_the_formulas(
    db_url: str,
) -> None:
    """Readiness alone did not keep charges out: a server of this release started with
    auto-migration off on a database an older release wrote (found in an upgrade from the
    release of 79396bd, stamp 2, a budget of 10: 8.106 reported, 8.206 owed) admitted charges
    on the stale totals, calibrated to fill the budget, and once ``migrate`` re-derived the
    curves the ledger held 10.1. Charges and holds are now refused (503, nothing recorded)
    until the curves are re-derived; reads and replays of earlier answers still work."""
    settings = make_settings(db_url)  # auto-migration off, as with a separate migration job
    laplace = {"mechanism": {"mechanism": "laplace", "epsilon": 0.1}}
    with TestClient(create_app(settings), headers=ADMIN) as c:
        ds = new_dataset(c)["id"]
        first = c.post(
            f"/v1/datasets/{ds}/charges", json=laplace, headers={"Idempotency-Key": "k1"}
        )
        assert first.status_code == 201, first.text
    run_sql(  # as an older release left it (stamp behind), before `migrate` has run
        db_url,
        "UPDATE app_setting SET value = :v WHERE key = :k",
        k=FORMULAS_SETTING,
        v=str(CURVE_FORMULAS_VERSION - 1),
    )
    with TestClient(create_app(settings), raise_server_exceptions=False, headers=ADMIN) as c:
        assert c.get("/readyz").status_code == 503
        for path, body in (("charges", laplace), ("reservations", laplace)):
            refused = c.post(f"/v1/datasets/{ds}/{path}", json=body)
            assert refused.status_code == 503, refused.text
            assert "privacy-ledger migrate" in refused.json()["detail"]
        dry = c.post(f"/v1/datasets/{ds}/charges", json=laplace, params={"dry_run": "true"})
        assert dry.status_code == 503, dry.text
        replay = c.post(
            f"/v1/datasets/{ds}/charges", json=laplace, headers={"Idempotency-Key": "k1"}
        )
        assert replay.status_code == 201 and replay.json() == first.json()
        budget = c.get(f"/v1/datasets/{ds}/budget")
        assert budget.status_code == 200 and budget.json()["entries"] == 1  # nothing recorded
        assert (
            c.get(f"/v1/datasets/{ds}/reservations", params={"status": "all"}).json()[
                "reservations"
            ]
            == []
        )
        db: Database = c.app.state.db  # type: ignore[attr-defined]
        rederive_if_formulas_changed(db)  # what `migrate` runs
        admitted = c.post(f"/v1/datasets/{ds}/charges", json=laplace)
        assert admitted.status_code == 201, admitted.text
