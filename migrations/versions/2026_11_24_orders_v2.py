"""order grid v2: re-derive every stored curve, rebuild totals and held sums

The grid of Renyi orders gained 1.01..1.09 (``ORDERS_VERSION`` 2; the accounting core's
``orders`` module). A stored RDP vector belongs to the grid it was computed on, so every ledger
entry's and reservation's curve is re-derived from its stored mechanism (the ledger's source of
truth), then each dataset's totals are rebuilt from its ledger in ledger order with the charge
path's own round-up additions (so ``verify`` matches them bit for bit), its spend recomputed
under its filter, and its held sum rebuilt from its active reservations.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-24
"""

from __future__ import annotations

import math
from typing import Any

import sqlalchemy as sa
from alembic import op

from app.accounting.curve import PrivacyCurve
from app.accounting.filters import Budget, Filter, FilterKind
from app.accounting.mechanisms import mechanism_from_dict
from app.accounting.running import RunningSum
from app.db.codec import curve_columns, held_to_bytes
from app.db.migrate import refuse_populated_downgrade

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

_CURVE = ("rho", "rdp", "pure_eps", "gaussian_only", "delta", "orders_version")


def _table(name: str, *extra: sa.Column[Any]) -> sa.TableClause:
    return sa.table(
        name,
        sa.column("rho", sa.Float),
        sa.column("rdp", sa.LargeBinary),
        sa.column("pure_eps", sa.Float),
        sa.column("gaussian_only", sa.Boolean),
        sa.column("delta", sa.Float),
        sa.column("orders_version", sa.Integer),
        *extra,
    )


def _curve(mechanism: dict[str, Any]) -> PrivacyCurve:
    return mechanism_from_dict(mechanism).curve()


def upgrade() -> None:
    conn = op.get_bind()
    entry = _table(
        "ledger_entry",
        sa.column("id", sa.BigInteger),
        sa.column("dataset_id", sa.String),
        sa.column("seq", sa.BigInteger),
        sa.column("kind", sa.String),
        sa.column("count", sa.BigInteger),
        sa.column("mechanism", sa.JSON),
    )
    hold = _table(
        "reservation",
        sa.column("id", sa.String),
        sa.column("dataset_id", sa.String),
        sa.column("status", sa.String),
        sa.column("mechanism", sa.JSON),
        sa.column("expires_at", sa.DateTime(timezone=True)),
        sa.column("created_at", sa.DateTime(timezone=True)),
    )
    dataset = sa.table(
        "dataset",
        sa.column("id", sa.String),
        sa.column("budget_epsilon", sa.Float),
        sa.column("budget_delta", sa.Float),
        sa.column("filter", sa.String),
        sa.column("filter_bound", sa.Float),
        sa.column("allowed_mechanisms", sa.JSON),
    )
    totals = _table(
        "dataset_total",
        sa.column("dataset_id", sa.String),
        sa.column("entry_count", sa.BigInteger),
        sa.column("mechanism_counts", sa.JSON),
        sa.column("spent_epsilon", sa.Float),
        sa.column("spent_method", sa.String),
        sa.column("held_count", sa.BigInteger),
        sa.column("held", sa.LargeBinary),
        sa.column("held_next_expiry", sa.DateTime(timezone=True)),
    )
    for ds in conn.execute(sa.select(dataset)).all():
        total = PrivacyCurve.zero()
        n = 0
        counts: dict[str, Any] = {}
        rows = conn.execute(
            sa.select(entry.c.id, entry.c.kind, entry.c.count, entry.c.mechanism)
            .where(entry.c.dataset_id == ds.id)
            .order_by(entry.c.seq)
        ).all()
        for e in rows:
            curve = _curve(e.mechanism)
            conn.execute(sa.update(entry).where(entry.c.id == e.id).values(**curve_columns(curve)))
            total = total + curve
            n += 1
            c = counts.setdefault(e.kind, {"entries": 0, "count": 0, "rho": 0.0})
            c["entries"] += 1
            c["count"] += e.count
            rho_sum = c["rho"] + curve.rho if c["rho"] is not None else None
            c["rho"] = rho_sum if rho_sum is not None and math.isfinite(rho_sum) else None
        held = RunningSum()
        next_expiry = None
        for h in conn.execute(
            sa.select(hold.c.id, hold.c.status, hold.c.mechanism, hold.c.expires_at)
            .where(hold.c.dataset_id == ds.id)
            .order_by(hold.c.created_at, hold.c.id)
        ).all():
            curve = _curve(h.mechanism)
            conn.execute(sa.update(hold).where(hold.c.id == h.id).values(**curve_columns(curve)))
            if h.status == "active":
                held = held.add(curve)
                if next_expiry is None or h.expires_at < next_expiry:
                    next_expiry = h.expires_at
        kind, budget = FilterKind(ds.filter), Budget(ds.budget_epsilon, ds.budget_delta)
        # rdp_fixed_orders (revision 0006) only meets this revision after a forced downgrade;
        # its parameters are re-derived from the budget as at creation (0006 stores them)
        flt = (
            Filter.create(kind, budget, ds.allowed_mechanisms)
            if kind is FilterKind.RDP_FIXED_ORDERS
            else Filter(kind, budget, ds.filter_bound)
        )
        spent = flt.spend(total)
        conn.execute(
            sa.update(totals)
            .where(totals.c.dataset_id == ds.id)
            .values(
                **curve_columns(total),
                entry_count=n,
                mechanism_counts=counts,
                spent_epsilon=spent.epsilon,
                spent_method=spent.method,
                held_count=held.count,
                held=held_to_bytes(held),
                held_next_expiry=next_expiry,
            )
        )


def downgrade() -> None:
    """The curves cannot be put back on the old grid (its code is gone): a populated ledger is
    refused unless forced, and a forced downgrade leaves grid-v2 curves that older code refuses
    to read (``RuntimeError`` naming the grid), never misreads."""
    refuse_populated_downgrade()
