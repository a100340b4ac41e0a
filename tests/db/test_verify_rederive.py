"""A ledger written by an older release keeps the curves that release computed: where a formula
was since corrected upward (DP-SGD at sigma 0.65, q 1e-6 was stored 14 % below the exact RDP at
order 2.6 before ff22b6b / 4e9a4c1; discrete Laplace at Delta 1e7 before 2556fc4), the upgraded
service went on summing the old, too-low curves. ``verify`` named the entries, but ``--rebuild``
only re-summed the same stored curves: the dataset's spend stayed below what its mechanisms imply,
and a hold made before the upgrade was committed with its old curve.

The rows are shaped as such a release left them: a stored curve (with totals consistent with it)
below what the current formula gives for the stored mechanism. The oracle is the service's own
``compose`` of the ledger's mechanisms (which computes every curve afresh)."""

from __future__ import annotations

import json
import logging
import math
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, event, text

from app.accounting.orders import CURVE_FORMULAS_VERSION, ORDERS
from app.main import create_app
from app.principal import SYSTEM
from app.services import verification
from tests.conftest import ADMIN, make_settings, new_dataset

STORED = {"mechanism": "subsampled_gaussian", "sigma": 0.7, "sample_rate": 1e-6, "steps": 10**9}
TRUE = {**STORED, "sigma": 0.65}  # what the rows say was run; its curve is higher everywhere


def _compose(client: TestClient, mechanisms: list[dict[str, object]]) -> float:
    r = client.post(
        "/v1/accounting/compose",
        json={"mechanisms": mechanisms, "delta": 1e-6, "accounting": "rdp"},
    )
    assert r.status_code == 200, r.text
    return float(r.json()["epsilon"])


def test_rebuild_rederives_curves_an_older_release_stored(client: TestClient, db_url: str) -> None:
    ds = new_dataset(client, budget={"epsilon": 50.0, "delta": 1e-6}, adaptive=False)
    for _ in range(2):
        r = client.post(f"/v1/datasets/{ds['id']}/charges", json={"mechanism": STORED})
        assert r.status_code == 201, r.text
    r = client.post(
        f"/v1/datasets/{ds['id']}/reservations", json={"mechanism": STORED, "ttl_seconds": 3600}
    )
    assert r.status_code == 201, r.text
    hold = r.json()["id"]
    engine = create_engine(db_url)
    with engine.begin() as conn:  # the rows' mechanism is TRUE; their curves are STORED's
        for table in ("ledger_entry", "reservation"):
            conn.execute(
                text(f"UPDATE {table} SET mechanism = :m WHERE dataset_id = :d"),
                {"m": json.dumps({**TRUE, "count": 1, "v": 1}), "d": ds["id"]},
            )
    engine.dispose()
    owed = _compose(client, [TRUE, TRUE])
    assert owed > _compose(client, [STORED, STORED])  # the case is not vacuous
    db = client.app.state.db  # type: ignore[attr-defined]
    found = verification.verify(db, SYSTEM).datasets[0]
    assert len(found.entries_with_curve_mismatch) == 2 and not found.ok

    verification.verify(db, SYSTEM, rebuild=True)
    after = verification.verify(db, SYSTEM).datasets[0]
    assert after.ok, after
    spent = client.get(f"/v1/datasets/{ds['id']}/budget").json()["spent"]["epsilon"]
    assert spent >= owed

    # the hold made before the upgrade is committed with the current curve of its mechanism
    assert client.post(f"/v1/reservations/{hold}/commit").status_code in (200, 201)
    assert verification.verify(db, SYSTEM).datasets[0].ok
    spent = client.get(f"/v1/datasets/{ds['id']}/budget").json()["spent"]["epsilon"]
    assert spent >= _compose(client, [TRUE, TRUE, TRUE])


PLD_MIX = [
    {"mechanism": "gaussian", "sigma": 3.0, "sensitivity": 1.0},
    {"mechanism": "gaussian", "sigma": 10.0, "count": 5},
    {"mechanism": "laplace", "epsilon": 0.05},
    {"mechanism": "randomized_response", "epsilon": 0.1, "k": 4},
    {"mechanism": "subsampled_gaussian", "sigma": 1.1, "sample_rate": 0.01, "steps": 100},
    {"mechanism": "discrete_laplace", "epsilon": 0.04, "sensitivity": 2},
]


def test_rederiving_curves_keeps_a_pld_that_matches_its_ledger(
    client: TestClient, db_url: str
) -> None:
    """Re-deriving entries' curves does not touch a ``pld`` dataset's distribution (it comes
    from the mechanisms, not the curves): a stored distribution that matches the ledger is kept,
    not replaced by the verify's regrouped recomposition, which can certify a lower epsilon (by
    5.7e-7 on a 28-entry ledger an older release wrote) than the one the charges composed."""
    ds = new_dataset(
        client, budget={"epsilon": 50.0, "delta": 1e-6}, accounting="pld", adaptive=False
    )
    for i in range(24):
        wire = PLD_MIX[i % len(PLD_MIX)]
        r = client.post(f"/v1/datasets/{ds['id']}/charges", json={"mechanism": wire})
        assert r.status_code == 201, r.text
    before = client.get(f"/v1/datasets/{ds['id']}/budget").json()["spent"]["epsilon"]
    engine = create_engine(db_url)
    with engine.begin() as conn:  # one entry's curve as an older formula left it: lower
        target = conn.execute(
            text("SELECT id FROM ledger_entry WHERE dataset_id = :d AND seq = 5"), {"d": ds["id"]}
        ).scalar_one()
        conn.execute(text("UPDATE ledger_entry SET rho = rho / 2 WHERE id = :i"), {"i": target})
    engine.dispose()
    db = client.app.state.db  # type: ignore[attr-defined]
    assert verification.verify(db, SYSTEM).datasets[0].entries_with_curve_mismatch == [target]
    verification.verify(db, SYSTEM, rebuild=True)
    assert verification.verify(db, SYSTEM).datasets[0].ok
    after = client.get(f"/v1/datasets/{ds['id']}/budget").json()["spent"]["epsilon"]
    assert after >= before


def test_the_first_auto_migrating_start_rederives_them(client: TestClient, db_url: str) -> None:
    """Without an operator: the first start-up that migrates (and ``privacy-ledger migrate``)
    re-derives once per formulas version; the version is stamped, so the next start reads
    nothing."""
    ds = new_dataset(client, budget={"epsilon": 50.0, "delta": 1e-6}, adaptive=False)
    r = client.post(f"/v1/datasets/{ds['id']}/charges", json={"mechanism": STORED})
    assert r.status_code == 201, r.text
    engine = create_engine(db_url)
    with engine.begin() as conn:  # as the older release left it: no formulas stamp
        conn.execute(
            text("UPDATE ledger_entry SET mechanism = :m WHERE dataset_id = :d"),
            {"m": json.dumps({**TRUE, "count": 1, "v": 1}), "d": ds["id"]},
        )
        # (the fixture's server stamped the database it found empty: ``stamp_if_empty``)
        conn.execute(
            text("DELETE FROM app_setting WHERE key = :k"), {"k": verification.FORMULAS_SETTING}
        )
    engine.dispose()
    owed = _compose(client, [TRUE])
    with TestClient(
        create_app(make_settings(db_url).model_copy(update={"auto_migrate": True})), headers=ADMIN
    ) as c:
        spent = c.get(f"/v1/datasets/{ds['id']}/budget").json()["spent"]["epsilon"]
        assert spent >= owed
        assert verification.verify(c.app.state.db, SYSTEM).ok  # type: ignore[attr-defined]
        again = verification.rederive_if_formulas_changed(c.app.state.db)  # type: ignore[attr-defined]
        assert again is None


def test_a_start_whose_rederivation_fails_still_serves_and_says_why(
    db_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The repair runs inside the start-up: if it fails (a stored mechanism this release no longer
    reads, a database error), the server starts anyway, logs what to run, and leaves the version
    unstamped so that the next start tries again; it did not start at all."""

    def broken(_db: object) -> None:
        raise RuntimeError("a stored mechanism this release cannot read")

    monkeypatch.setattr(verification, "rederive_if_formulas_changed", broken)
    settings = make_settings(db_url).model_copy(update={"auto_migrate": True})
    with caplog.at_level(logging.ERROR), TestClient(create_app(settings), headers=ADMIN) as c:
        assert c.get("/healthz").status_code == 200
        assert c.get("/v1/datasets").status_code == 200
        # unstamped and storing curves: not ready until a pass succeeds (or `migrate` runs)
        ds = new_dataset(c)
        laplace = {"mechanism": "laplace", "epsilon": 0.1}
        charge = c.post(f"/v1/datasets/{ds['id']}/charges", json={"mechanism": laplace})
        assert charge.status_code == 201, charge.text
        ready = c.get("/readyz")
        assert ready.status_code == 503 and "migrate" in ready.json()["detail"], ready.text
    assert "privacy-ledger verify --rebuild" in caplog.text
    assert "a stored mechanism this release cannot read" in caplog.text


def _as_a_newer_release_left_it(client: TestClient, db_url: str) -> tuple[str, float]:
    """A dataset whose entry a release with newer formulas (``CURVE_FORMULAS_VERSION + 1``,
    stamped) derived: its stored curve, corrected upward by that release, is above what this
    (older) release computes for the stored mechanism. Returns the dataset id and the spend the
    newer release reported."""
    ds = new_dataset(client, budget={"epsilon": 50.0, "delta": 1e-6}, adaptive=False)
    r = client.post(f"/v1/datasets/{ds['id']}/charges", json={"mechanism": TRUE})
    assert r.status_code == 201, r.text
    engine = create_engine(db_url)
    with engine.begin() as conn:  # the mechanism as stored; this release's curve for it is lower
        conn.execute(
            text("UPDATE ledger_entry SET mechanism = :m WHERE dataset_id = :d"),
            {"m": json.dumps({**STORED, "count": 1, "v": 1}), "d": ds["id"]},
        )
        conn.execute(
            text("UPDATE app_setting SET value = :v WHERE key = :k"),
            {"v": str(CURVE_FORMULAS_VERSION + 1), "k": verification.FORMULAS_SETTING},
        )
    engine.dispose()
    spent = client.get(f"/v1/datasets/{ds['id']}/budget").json()["spent"]["epsilon"]
    assert spent > _compose(client, [STORED])  # the case is not vacuous
    return ds["id"], spent


def _stamp(db_url: str) -> str:
    engine = create_engine(db_url)
    with engine.connect() as conn:
        value = conn.execute(
            text("SELECT value FROM app_setting WHERE key = :k"),
            {"k": verification.FORMULAS_SETTING},
        ).scalar_one()
    engine.dispose()
    return str(value)


def test_an_older_release_leaves_a_newer_stamp_and_its_curves(
    client: TestClient, db_url: str
) -> None:
    """A replica of the previous release restarting during a rolling upgrade (auto-migration
    on, the default) found the stamp not equal to its own version and re-derived every stored
    curve under its older formulas, then stamped its version: a correction upward was undone
    (an rdp entry with decreasing epsilons written under version 1: 22.631 -> 22.146 on an
    upgraded database) and every replica of the new release without auto-migration turned
    unready. A stamp at or above this release's version is current: nothing is re-derived and
    the stamp is not lowered."""
    dataset_id, spent = _as_a_newer_release_left_it(client, db_url)
    db = client.app.state.db  # type: ignore[attr-defined]
    assert verification.rederive_if_formulas_changed(db) is None
    assert _stamp(db_url) == str(CURVE_FORMULAS_VERSION + 1)
    assert client.get(f"/v1/datasets/{dataset_id}/budget").json()["spent"]["epsilon"] == spent


def test_an_older_release_rebuild_keeps_a_newer_release_curves(
    client: TestClient, db_url: str
) -> None:
    """``verify --rebuild`` run by an older release's CLI against a database a newer release
    stamped reports the entries its formulas disagree with, but does not rewrite them with its
    older curves (which would lower the dataset's spend below what the newer release owes)."""
    dataset_id, spent = _as_a_newer_release_left_it(client, db_url)
    db = client.app.state.db  # type: ignore[attr-defined]
    report = verification.verify(db, SYSTEM, rebuild=True).datasets[0]
    assert len(report.entries_with_curve_mismatch) == 1
    assert client.get(f"/v1/datasets/{dataset_id}/budget").json()["spent"]["epsilon"] == spent
    assert _stamp(db_url) == str(CURVE_FORMULAS_VERSION + 1)


def test_a_rebuild_that_keeps_a_newer_release_curves_does_not_say_it_rederived_them(
    client: TestClient, db_url: str
) -> None:
    """When an older release's rebuild fixes drifted totals but keeps a newer release's curves,
    its ``totals.rebuilt`` event named those entries under ``curves_rederived`` although it left
    them as they were: the audit trail then says curves were rewritten that were not."""
    dataset_id, _ = _as_a_newer_release_left_it(client, db_url)
    engine = create_engine(db_url)
    with engine.begin() as conn:  # totals that drifted from the ledger: the rebuild has work
        conn.execute(
            text("UPDATE dataset_total SET rho = rho * 2 WHERE dataset_id = :d"), {"d": dataset_id}
        )
    engine.dispose()
    db = client.app.state.db  # type: ignore[attr-defined]
    report = verification.verify(db, SYSTEM, rebuild=True).datasets[0]
    assert report.rebuilt and "rho" in report.drift
    assert len(report.entries_with_curve_mismatch) == 1  # still reported as differing
    r = client.get("/v1/audit", params={"action": "totals.rebuilt"})
    assert r.status_code == 200, r.text
    (event,) = r.json()["events"]
    said = event["details"]["curves_rederived"]
    assert (said["entries"], said["entries_count"]) == ([], 0)


def _rebuild_counting_updates(db: Any) -> tuple[Any, list[str]]:
    """``verify --rebuild``'s report for the first dataset, and the ``UPDATE ledger_entry``
    statements it ran (an executemany counts once)."""
    updates: list[str] = []

    def seen(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        if statement.lstrip().upper().startswith("UPDATE LEDGER_ENTRY"):
            updates.append(statement)

    event.listen(db.write_engine, "before_cursor_execute", seen)
    try:
        report = verification.verify(db, SYSTEM, rebuild=True).datasets[0]
    finally:
        event.remove(db.write_engine, "before_cursor_execute", seen)
    return report, updates


def test_rederiving_a_ledger_rewrites_its_curves_in_a_few_statements(
    client: TestClient, db_url: str
) -> None:
    """The first migrate past a formulas version re-derives every stored curve it finds stale,
    under the dataset's lock (on SQLite: the database's one write lock) and before the server
    serves: one UPDATE per entry took 4 min 41 s for 200,000 exponential entries written by
    the version-1 release (detecting them took 23 s). The entries are rewritten in batches,
    a statement per chunk of the ledger read, not one per entry (counted, not timed)."""
    entries = 25
    ds = new_dataset(client, budget={"epsilon": 50.0, "delta": 1e-6}, adaptive=False)
    low = {"mechanism": "laplace", "epsilon": 0.1}
    for _ in range(entries):
        r = client.post(f"/v1/datasets/{ds['id']}/charges", json={"mechanism": low})
        assert r.status_code == 201, r.text
    high = [{"mechanism": "laplace", "epsilon": 0.1 + 0.01 * (i % 5)} for i in range(entries)]
    engine = create_engine(db_url)
    with engine.begin() as conn:  # what was run; the stored curves are an older formula's
        for seq, wire in enumerate(high, start=1):
            conn.execute(
                text("UPDATE ledger_entry SET mechanism = :m WHERE dataset_id = :d AND seq = :s"),
                {"m": json.dumps({**wire, "count": 1, "v": 1}), "d": ds["id"], "s": seq},
            )
    engine.dispose()
    db = client.app.state.db  # type: ignore[attr-defined]
    report, updates = _rebuild_counting_updates(db)
    assert len(report.entries_with_curve_mismatch) == entries - entries // 5  # eps 0.1 matched
    assert len(updates) == 1, updates
    assert verification.verify(db, SYSTEM).datasets[0].ok
    spent = client.get(f"/v1/datasets/{ds['id']}/budget").json()["spent"]["epsilon"]
    assert spent >= _compose(client, high)


DECREASING = {
    "mechanism": "rdp",
    "orders": [2, 4, 8, 16, 32, 64, 128, 256],
    "epsilons": [0.5, 0.4, 0.3, 0.25, 0.25, 0.25, 0.25, 0.25],
}


def _least_at_or_above(orders: list[int], epsilons: list[float]) -> list[float]:
    """The curve the release of commit 79396bd stored for an ``rdp`` entry: each grid order took
    the least given value at an order at or above it (+inf above the largest)."""
    out = []
    for alpha in ORDERS.tolist():
        above = [e for o, e in zip(orders, epsilons, strict=True) if o >= alpha]
        out.append(min(above) if above else float("inf"))
    return out


def test_a_database_stamped_2_before_the_rdp_reading_changed_is_rederived(
    client: TestClient, db_url: str
) -> None:
    """Version 2 was stamped by the release of 79396bd (the exact exponential curve); the next
    commit (c97fd72) changed how an ``rdp`` entry with decreasing epsilons is read (the next
    given order's own value, higher than the least value above it that 79396bd stored) and
    folded that into version 2. A database that release wrote is stamped 2 and was never
    re-derived: an adaptive dataset upgraded from it reported 22.131 where 22.631 is owed."""
    ds = new_dataset(client, budget={"epsilon": 50.0, "delta": 1e-5})
    for _ in range(2):
        r = client.post(f"/v1/datasets/{ds['id']}/charges", json={"mechanism": DECREASING})
        assert r.status_code == 201, r.text
    owed = client.get(f"/v1/datasets/{ds['id']}/budget").json()["spent"]["epsilon"]
    old = _least_at_or_above(DECREASING["orders"], DECREASING["epsilons"])  # type: ignore[arg-type]
    engine = create_engine(db_url)
    with engine.begin() as conn:  # as that release left it: its curves, stamp 2
        conn.execute(
            text("UPDATE ledger_entry SET rdp = :r WHERE dataset_id = :d"),
            {"r": np.asarray(old, dtype="<f8").tobytes(), "d": ds["id"]},
        )
        conn.execute(
            text("UPDATE app_setting SET value = '2' WHERE key = :k"),
            {"k": verification.FORMULAS_SETTING},
        )
    engine.dispose()
    db = client.app.state.db  # type: ignore[attr-defined]
    assert verification.verify(db, SYSTEM).datasets[0].entries_with_curve_mismatch
    verification.rederive_if_formulas_changed(db)
    assert verification.verify(db, SYSTEM).datasets[0].ok
    spent = client.get(f"/v1/datasets/{ds['id']}/budget").json()["spent"]["epsilon"]
    assert spent >= owed


def test_rederiving_many_entries_computes_their_curves_together_and_updates_in_batches(
    client: TestClient, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Re-deriving after a formula change computes the mismatched entries' curves per kind
    together, as the check did (one by one, 5,000 distinct randomized responses with k >= 7 took
    48 s of CPU under the dataset's lock, 100,000 would take a quarter of an hour), and rewrites
    them in one executemany per page of the ledger rather than one UPDATE per entry."""
    from app.accounting.kinds._spec import unit_curve
    from app.accounting.kinds.randomized_response import RandomizedResponse

    monkeypatch.setattr(verification, "READ_CHUNK", 4)
    ds = new_dataset(client, budget={"epsilon": 50.0, "delta": 1e-6}, adaptive=False)
    n = 10
    for i in range(n):
        wire = {"mechanism": "randomized_response", "epsilon": 0.01 + 0.001 * i, "k": 7 + i}
        r = client.post(f"/v1/datasets/{ds['id']}/charges", json={"mechanism": wire})
        assert r.status_code == 201, r.text
    engine = create_engine(db_url)
    with engine.begin() as conn:  # curves an older release stored (1 % below)
        conn.execute(
            text("UPDATE ledger_entry SET rho = rho * 0.99 WHERE dataset_id = :d"), {"d": ds["id"]}
        )
    engine.dispose()
    db = client.app.state.db  # type: ignore[attr-defined]
    batches: list[int] = []
    unit_curves = RandomizedResponse.unit_curves.__func__  # type: ignore[attr-defined]

    def counted(cls, units):  # type: ignore[no-untyped-def]
        batches.append(len(units))
        return unit_curves(cls, units)

    monkeypatch.setattr(RandomizedResponse, "unit_curves", classmethod(counted))
    unit_curve.cache_clear()  # as in a process that did not charge them
    report, updates = _rebuild_counting_updates(db)
    assert len(report.entries_with_curve_mismatch) == n
    assert len(batches) <= 2 * math.ceil(n / 4), batches  # the check's and the rewrite's pages
    assert len(updates) <= math.ceil(n / 4), len(updates)
    assert verification.verify(db, SYSTEM).datasets[0].ok


def test_a_rebuild_of_many_entries_lists_a_bounded_number_of_them(
    client: TestClient, db_url: str
) -> None:
    """The ``totals.rebuilt`` event and the verify report listed every re-derived entry id: one
    event for 100,000 entries was 689 KB, and an audit page of such events hundreds of MB. They
    list the first ``LISTED_MISMATCHES`` by ledger position, with the count of all of them and
    the seq range that holds them."""
    n = verification.LISTED_MISMATCHES + 50
    ds = new_dataset(client, budget={"epsilon": 500.0, "delta": 1e-6}, adaptive=False)
    for i in range(n):
        wire = {"mechanism": "laplace", "epsilon": 0.01 + 0.0001 * i}
        r = client.post(f"/v1/datasets/{ds['id']}/charges", json={"mechanism": wire})
        assert r.status_code == 201, r.text
    engine = create_engine(db_url)
    with engine.begin() as conn:  # curves an older release stored (1 % below), but for seq 1
        conn.execute(
            text("UPDATE ledger_entry SET rho = rho * 0.99 WHERE dataset_id = :d AND seq > 1"),
            {"d": ds["id"]},
        )
        ids = (
            conn.execute(
                text("SELECT id FROM ledger_entry WHERE dataset_id = :d AND seq > 1 ORDER BY seq"),
                {"d": ds["id"]},
            )
            .scalars()
            .all()
        )
    engine.dispose()
    stale = n - 1
    listed = verification.LISTED_MISMATCHES

    report = client.post("/v1/admin/verify").json()["datasets"][0]
    assert report["entries_with_curve_mismatch"] == ids[:listed]
    assert report["entries_with_curve_mismatch_count"] == stale
    assert report["entries_with_curve_mismatch_truncated"] is True
    assert report["entries_with_curve_mismatch_seq_range"] == [2, n]

    rebuilt = client.post("/v1/admin/verify", params={"rebuild": True}).json()["datasets"][0]
    assert rebuilt["rebuilt"] is True and rebuilt["entries_with_curve_mismatch_count"] == stale
    r = client.get("/v1/audit", params={"action": "totals.rebuilt"})
    assert r.status_code == 200, r.text
    (event,) = r.json()["events"]
    said = event["details"]["curves_rederived"]
    assert said["entries"] == ids[:listed]
    assert (said["entries_count"], said["entries_truncated"]) == (stale, True)
    assert said["entries_seq_range"] == [2, n]
    assert (said["holds"], said["holds_count"], said["holds_truncated"]) == ([], 0, False)
    # bounded: the listed ids and a few fields, whatever the number of entries re-derived
    assert len(json.dumps(event)) < 200 + 12 * listed + 1_000, len(json.dumps(event))
    after = client.post("/v1/admin/verify").json()
    assert after["ok"] is True
    assert after["datasets"][0]["entries_with_curve_mismatch_count"] == 0
    assert after["datasets"][0]["entries_with_curve_mismatch_seq_range"] is None
