"""A database written on order grid v1 (239 orders) upgrades to head: every stored curve is
re-derived on the current grid from its mechanism, totals and held sums are rebuilt, and
``verify`` finds nothing to rebuild."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import numpy as np
from sqlalchemy import create_engine, text

from app.accounting.mechanisms import mechanism_from_dict
from app.accounting.orders import ORDERS, ORDERS_VERSION
from app.db import migrate
from app.db.engine import Database
from app.principal import SYSTEM
from app.services import datasets, verification

V1_ORDERS = 239  # the grid before ORDERS_VERSION 2
ENTRIES = [
    {"mechanism": "gaussian", "sigma": 4.0, "sensitivity": 1.0, "count": 1},
    {"mechanism": "laplace", "epsilon": 0.1, "count": 3},
    {"mechanism": "randomized_response", "epsilon": 1.0, "k": 4, "count": 1},
]
HOLD = {"mechanism": "laplace", "epsilon": 0.2, "count": 1}


def _v1_row(mechanism: dict[str, object]) -> dict[str, object]:
    """What the grid-v1 code stored for a mechanism: its scalars, and a 239-value vector (its
    values do not matter here: the migration must not read them)."""
    curve = mechanism_from_dict(mechanism).curve()
    return {
        "rho": curve.rho,
        "rdp": np.full(V1_ORDERS, 0.5, dtype="<f8").tobytes(),
        "pure_eps": curve.pure_eps,
        "gaussian_only": curve.gaussian_only,
        "orders_version": 1,
        "mechanism": json.dumps({**mechanism, "v": 1}),
    }


def test_a_v1_database_upgrades_to_consistent_v2_totals(db_url: str) -> None:
    migrate.downgrade(db_url, "0003", force=True)
    now = datetime.now(UTC)
    engine = create_engine(db_url)
    try:
        with engine.begin() as c:
            c.execute(
                text(
                    "INSERT INTO dataset (id, name, budget_epsilon, budget_delta, accounting, "
                    "adaptive, filter, created_at, updated_at) VALUES ('ds_v1', 'old', 10.0, "
                    "1e-6, 'rdp', false, 'rdp', :t, :t)"
                ),
                {"t": now},
            )
            c.execute(
                text(
                    "INSERT INTO dataset_total (dataset_id, orders_version, rho, rdp, pure_eps, "
                    "gaussian_only, entry_count, mechanism_counts, spent_epsilon, spent_method, "
                    "last_entry_at, updated_at) VALUES ('ds_v1', 1, 0.0, :rdp, 0.0, true, 0, "
                    "'{}', 0.0, 'rdp_improved', :t, :t)"
                ),
                {"rdp": np.zeros(V1_ORDERS).tobytes(), "t": now},
            )
            for seq, m in enumerate(ENTRIES, start=1):
                row = _v1_row(m)
                c.execute(
                    text(
                        "INSERT INTO ledger_entry (dataset_id, seq, created_at, kind, mechanism, "
                        "count, rho, rdp, pure_eps, gaussian_only, orders_version, source, "
                        "spent_epsilon) VALUES ('ds_v1', :seq, :t, :kind, :mechanism, :count, "
                        ":rho, :rdp, :pure_eps, :gaussian_only, 1, 'charge', 0.0)"
                    ),
                    {**row, "seq": seq, "t": now, "kind": m["mechanism"], "count": m["count"]},
                )
            hold = _v1_row(HOLD)
            c.execute(
                text(
                    "INSERT INTO reservation (id, dataset_id, status, kind, mechanism, count, rho, "
                    "rdp, pure_eps, gaussian_only, orders_version, created_at, expires_at) VALUES "
                    "('rsv_v1', 'ds_v1', 'active', 'laplace', :mechanism, 1, :rho, :rdp, "
                    ":pure_eps, :gaussian_only, 1, :t, :e)"
                ),
                {**hold, "t": now, "e": now + timedelta(hours=1)},
            )
    finally:
        engine.dispose()

    migrate.upgrade(db_url)

    db = Database(db_url)
    try:
        report = verification.verify(db, SYSTEM)
        assert report.ok, report
        answer = datasets.budget_view(db, SYSTEM, "ds_v1")
        assert answer.entries == 3
        assert answer.reserved is not None and answer.reserved.count == 1
        with db.read() as s:
            versions = s.execute(text("SELECT DISTINCT orders_version FROM ledger_entry")).all()
            lengths = s.execute(text("SELECT rdp FROM ledger_entry")).scalars().all()
        assert versions == [(ORDERS_VERSION,)]
        assert {len(b) for b in lengths} == {8 * ORDERS.size}
    finally:
        db.dispose()
