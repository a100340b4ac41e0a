"""A hold made by an older release becomes a ledger entry with the curve it stored (never
recomputed): when that happens while a re-deriving rebuild runs, the entry must be re-derived too.

``verify`` checks the stored curves outside the lock, then takes the dataset's lock, whose first
step settles the due holds, and re-derives the entries it found and the holds still active. A
stale hold charged after the check (its expiry settled by the rebuild's own lock, or a commit or a
sweep that came first) was neither: the start-up pass stamped the formulas version current over a
ledger entry whose curve is below what its mechanism owes, and its totals summed that curve.

The rows are shaped as in ``test_verify_rederive``: the stored mechanism is ``TRUE``, the stored
curve ``STORED``'s (lower at every order). The oracle is the service's own ``compose`` of the
ledger's mechanisms (which computes every curve afresh)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text

from app.principal import SYSTEM
from app.services import reservations, verification
from tests.conftest import expire_active_holds, new_dataset
from tests.db.test_verify_rederive import STORED, TRUE, _compose


def _stale_hold(client: TestClient, db_url: str) -> tuple[str, str]:
    """A dataset with one charge and one active hold, both as an older release left them (the
    mechanism ``TRUE``, the curve ``STORED``'s); the formulas stamp cleared, as a database
    written before the current version. The dataset's and the hold's ids."""
    ds = new_dataset(client, budget={"epsilon": 50.0, "delta": 1e-6}, adaptive=False)["id"]
    r = client.post(f"/v1/datasets/{ds}/charges", json={"mechanism": STORED})
    assert r.status_code == 201, r.text
    r = client.post(
        f"/v1/datasets/{ds}/reservations", json={"mechanism": STORED, "ttl_seconds": 600}
    )
    assert r.status_code == 201, r.text
    engine = create_engine(db_url)
    with engine.begin() as conn:
        for table in ("ledger_entry", "reservation"):
            conn.execute(
                text(f"UPDATE {table} SET mechanism = :m WHERE dataset_id = :d"),
                {"m": json.dumps({**TRUE, "count": 1, "v": 1}), "d": ds},
            )
        conn.execute(
            text("DELETE FROM app_setting WHERE key = :k"), {"k": verification.FORMULAS_SETTING}
        )
    engine.dispose()
    return ds, r.json()["id"]


def _assert_rederived(client: TestClient, ds: str) -> None:
    """Every entry's curve is its mechanism's and the spend covers what the mechanisms owe."""
    db = client.app.state.db  # type: ignore[attr-defined]
    report = verification.verify(db, SYSTEM).datasets[0]
    assert report.entries == 2
    assert report.entries_with_curve_mismatch == [], report
    assert report.ok, report
    owed = _compose(client, [TRUE, TRUE])
    assert owed > _compose(client, [STORED, STORED])  # the case is not vacuous
    assert client.get(f"/v1/datasets/{ds}/budget").json()["spent"]["epsilon"] >= owed


def test_a_stale_hold_due_when_the_formulas_pass_runs_is_rederived(
    client: TestClient, db_url: str
) -> None:
    """The hold fell due while no server ran (an upgrade's downtime): the pass's own lock
    settles it into the ledger before its totals are summed."""
    ds, _ = _stale_hold(client, db_url)
    expire_active_holds(db_url)
    db = client.app.state.db  # type: ignore[attr-defined]
    assert verification.rederive_if_formulas_changed(db) is not None
    _assert_rederived(client, ds)


@pytest.mark.parametrize("resolve", ["commit", "expiry"])
def test_a_stale_hold_charged_between_the_curve_check_and_the_lock_is_rederived(
    client: TestClient, db_url: str, monkeypatch: pytest.MonkeyPatch, resolve: str
) -> None:
    """The hold is committed (or charged at expiry by another replica's sweeper) after the
    rebuild checked the ledger's curves outside the lock and before it took the lock: the hook
    runs the other operation at exactly that point (nothing holds the lock then)."""
    ds, hold = _stale_hold(client, db_url)
    db = client.app.state.db  # type: ignore[attr-defined]
    unlocked: Callable[..., Any] = verification._ledger_pld_unlocked  # after the curve check
    ran: list[str] = []

    def charged_meanwhile(*args: Any, **kwargs: Any) -> Any:
        if not ran:
            ran.append(resolve)
            if resolve == "commit":
                r = client.post(f"/v1/reservations/{hold}/commit")
                assert r.status_code == 200, r.text
            else:
                expire_active_holds(db_url)
                assert reservations.sweep_expired(db) == 1  # the hold charged at expiry
        return unlocked(*args, **kwargs)

    monkeypatch.setattr(verification, "_ledger_pld_unlocked", charged_meanwhile)
    verification.rederive_if_formulas_changed(db)
    assert ran == [resolve]
    monkeypatch.undo()
    _assert_rederived(client, ds)
