"""verify reads the ledger in keyset pages (both backends), reports progress by counting the
rows it read, and names entries whose stored curve no longer matches their mechanism."""

from __future__ import annotations

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
