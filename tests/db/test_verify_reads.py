"""verify reads the ledger in keyset pages (both backends), reports progress by counting the
rows it read, and names entries whose stored curve no longer matches their mechanism."""

from __future__ import annotations

import contextlib

from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text

from app.principal import SYSTEM
from app.services import verification
from tests.conftest import new_dataset


def test_pages_progress_and_curve_mismatches(client: TestClient, db_url: str, monkeypatch) -> None:
    monkeypatch.setattr(verification, "READ_CHUNK", 3)  # several pages from a short ledger
    monkeypatch.setattr(verification, "CHECK_CHUNK", 2)  # and several chunks of distinct curves
    ds = new_dataset(client, budget={"epsilon": 50.0, "delta": 1e-6}, adaptive=False)
    wires = [{"mechanism": "laplace", "epsilon": 0.01}] * 5 + [
        {"mechanism": "gaussian", "sigma": 30.0},
        {"mechanism": "pure_dp", "epsilon": 0.02, "count": 2},
    ]
    for w in wires:
        assert (
            client.post(f"/v1/datasets/{ds['id']}/charges", json={"mechanism": w}).status_code
            == 201
        )
    db = client.app.state.db  # type: ignore[attr-defined]
    calls: list[tuple[int, int]] = []
    report = verification.verify(
        db, SYSTEM, progress=lambda done, total: calls.append((done, total))
    )
    assert report.ok
    assert calls[0] == (0, 2 * len(wires)) and calls[-1] == (2 * len(wires), 2 * len(wires))
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)
    engine = create_engine(db_url)
    try:
        with engine.begin() as conn:  # corrupt one stored curve (its rho) behind the service
            target = conn.execute(
                text("SELECT id FROM ledger_entry WHERE dataset_id = :d AND seq = 6"),
                {"d": ds["id"]},
            ).scalar_one()
            conn.execute(text("UPDATE ledger_entry SET rho = rho * 2 WHERE id = :i"), {"i": target})
    finally:  # a failed statement must not leave the engine's connection to a later test
        engine.dispose()
    item = verification.verify(db, SYSTEM).datasets[0]
    assert item.entries_with_curve_mismatch == [target]
    assert "rho" in item.drift and not item.ok
    rebuilt = verification.verify(db, SYSTEM, rebuild=True).datasets[0]
    assert (rebuilt.model_extra or {}).get("rebuilt") is True
    assert verification.verify(db, SYSTEM).datasets[0].drift == []


def test_curves_are_checked_page_by_page_as_the_ledger_is_read(
    client: TestClient, monkeypatch
) -> None:
    """The curve check runs on each page as it is read, so progress moves with it and only a
    page's mechanisms are held: it read the whole ledger first, holding every distinct entry's
    mechanism text and curve bytes (590 MB for 100,000 distinct ``rdp`` entries of 64 orders),
    then checked them with no progress at all (15 s for 100,000 distinct randomized responses,
    160 s for distinct DP-SGD runs: the bar stood at half way)."""
    monkeypatch.setattr(verification, "READ_CHUNK", 2)
    ds = new_dataset(client, budget={"epsilon": 50.0, "delta": 1e-6}, adaptive=False)
    n = 6
    for i in range(n):
        wire = {"mechanism": "laplace", "epsilon": 0.01 + 0.001 * i}
        r = client.post(f"/v1/datasets/{ds['id']}/charges", json={"mechanism": wire})
        assert r.status_code == 201, r.text
    done = [0]
    checked_at: list[tuple[int, int]] = []  # (progress so far, curves checked)
    stale_curves = verification._stale_curves

    def counted(mechanisms, *args):  # type: ignore[no-untyped-def]
        checked_at.append((done[0], len(mechanisms)))
        return stale_curves(mechanisms, *args)

    monkeypatch.setattr(verification, "_stale_curves", counted)
    db = client.app.state.db  # type: ignore[attr-defined]

    def progress(d: int, total: int) -> None:
        done[0] = d

    assert verification.verify(db, SYSTEM, progress=progress).ok
    assert sum(k for _, k in checked_at) == n
    assert [d for d, _ in checked_at] == [0, 2, 4]  # each page checked before the next is read
    assert max(k for _, k in checked_at) <= 2


def test_a_pld_ledger_is_recomposed_outside_the_dataset_lock(
    client: TestClient, db_url: str, monkeypatch
) -> None:
    """A ``pld`` dataset's distribution is recomposed from its ledger, one construction per
    distinct entry (2 ms for a Laplace, up to seconds for a DP-SGD run). That ran under the
    dataset's lock (on SQLite the whole database's write lock): 8,000 distinct entries held it
    for 17 s of CPU, 100,000 would hold it for minutes, every charge waiting. The ledger is
    append-only, so it is composed before the lock is taken; under it only the entries charged
    since are. Progress counts that work too (the bar stood at 100 % while it ran)."""
    from app.accounting import pld_mechanisms
    from app.services import admission

    monkeypatch.setattr(verification, "READ_CHUNK", 2)
    ds = new_dataset(
        client, budget={"epsilon": 5.0, "delta": 1e-6}, accounting="pld", adaptive=False
    )
    n = 5
    for i in range(n):
        wire = {"mechanism": "laplace", "epsilon": 0.01 + 0.001 * i}
        r = client.post(f"/v1/datasets/{ds['id']}/charges", json={"mechanism": wire})
        assert r.status_code == 201, r.text
    locked = [False]
    built: list[bool] = []  # per construction: under the lock?
    real_locked, for_mechanism = admission.locked, pld_mechanisms.for_mechanism

    @contextlib.contextmanager
    def tracked(*args, **kwargs):  # type: ignore[no-untyped-def]
        with real_locked(*args, **kwargs) as st:
            locked[0] = True
            try:
                yield st
            finally:
                locked[0] = False

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        built.append(locked[0])
        return for_mechanism(*args, **kwargs)

    monkeypatch.setattr(admission, "locked", tracked)
    monkeypatch.setattr(pld_mechanisms, "for_mechanism", counted)
    db = client.app.state.db  # type: ignore[attr-defined]
    calls: list[tuple[int, int]] = []
    report = verification.verify(db, SYSTEM, progress=lambda d, t: calls.append((d, t)))
    assert report.ok, report
    assert len(built) >= n and not any(built)  # every construction before the lock
    assert calls[-1][0] == calls[-1][1] == 3 * n  # check, PLD, sum: three units per entry
