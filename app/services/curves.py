"""Between stored rows and the accounting core: curve (de)serialisation and spend views."""

from __future__ import annotations

import hashlib
import json
import math
from datetime import UTC, datetime
from typing import Any

import numpy as np

from app.accounting.curve import PrivacyCurve
from app.accounting.filters import RHO_FILTERS, Budget, FilterKind, Spend, filter_spend
from app.accounting.orders import ORDERS, ORDERS_VERSION
from app.db.models import Dataset, DatasetTotal


def rdp_to_bytes(rdp: np.ndarray) -> bytes:
    """Little-endian float64 bytes of an RDP vector (exact round trip)."""
    return np.asarray(rdp, dtype="<f8").tobytes()


def rdp_from_bytes(data: bytes, orders_version: int) -> np.ndarray:
    """The stored vector; refuses vectors written for another order grid."""
    if orders_version != ORDERS_VERSION:
        raise RuntimeError(
            f"stored curve uses order grid v{orders_version}, this build uses v{ORDERS_VERSION}; "
            "run the migration that rebuilds totals"
        )
    v = np.frombuffer(data, dtype="<f8")
    if v.shape != ORDERS.shape:
        raise RuntimeError(f"stored curve has {v.size} orders, expected {ORDERS.size}")
    return v.astype(np.float64)


def curve_of(row: Any) -> PrivacyCurve:
    """The curve stored on a ledger entry, reservation or totals row."""
    return PrivacyCurve(
        rho=row.rho,
        rdp=rdp_from_bytes(row.rdp, row.orders_version),
        pure_eps=row.pure_eps,
        gaussian_only=row.gaussian_only,
    )


def finite_or_none(x: float | None) -> float | None:
    """JSON has no infinity: infinite values are reported as null."""
    if x is None or not math.isfinite(x):
        return None
    return float(x)


def iso(ts: datetime | None) -> str | None:
    """ISO 8601 in UTC (SQLite returns naive datetimes, which are UTC by construction)."""
    if ts is None:
        return None
    if ts.tzinfo is None:
        ts = ts.replace(tzinfo=UTC)
    return ts.astimezone(UTC).isoformat().replace("+00:00", "Z")


def budget_json(ds: Dataset) -> dict[str, float]:
    return {"epsilon": ds.budget_epsilon, "delta": ds.budget_delta}


def spent_json(ds: Dataset, curve: PrivacyCurve, s: Spend) -> dict[str, Any]:
    """``spent`` as reported everywhere: epsilon at the budget delta under the filter."""
    return {
        "epsilon": s.epsilon,
        "delta": s.delta,
        "rho": finite_or_none(curve.rho),
        "pure_epsilon": finite_or_none(curve.pure_eps),
        "method": s.method,
        "filter": ds.filter,
    }


def spend_of(ds: Dataset, curve: PrivacyCurve) -> Spend:
    """Spend of ``curve`` at the dataset's budget delta under its filter (``filter_spend``)."""
    return filter_spend(
        FilterKind(ds.filter), curve, Budget(ds.budget_epsilon, ds.budget_delta), ds.filter_bound
    )


def exhausted(ds: Dataset, curve: PrivacyCurve, spent_epsilon: float) -> bool:
    """No budget left: the filter's bound is reached (rho filters) or epsilon is spent."""
    if FilterKind(ds.filter) in RHO_FILTERS and ds.filter_bound is not None:
        return curve.rho >= ds.filter_bound or spent_epsilon >= ds.budget_epsilon
    return spent_epsilon >= ds.budget_epsilon


def remaining_json(ds: Dataset, curve: PrivacyCurve, spent_epsilon: float) -> dict[str, Any]:
    """What is left: epsilon (budget minus spend; composition is not additive, so this is an
    indication, the filter decides) and, for rho filters, the exact rho left."""
    rho_left = None
    if FilterKind(ds.filter) in RHO_FILTERS and ds.filter_bound is not None:
        rho_left = max(0.0, ds.filter_bound - curve.rho)
    return {
        "epsilon": max(0.0, ds.budget_epsilon - spent_epsilon),
        "delta": ds.budget_delta,
        "rho": rho_left,
    }


def totals_curve(t: DatasetTotal) -> PrivacyCurve:
    return curve_of(t)


def request_hash(payload: dict[str, Any]) -> str:
    """SHA-256 of the canonical JSON of a request (for Idempotency-Key comparison)."""
    blob = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


__all__ = [
    "budget_json",
    "curve_of",
    "exhausted",
    "finite_or_none",
    "iso",
    "rdp_from_bytes",
    "rdp_to_bytes",
    "remaining_json",
    "request_hash",
    "spend_of",
    "spent_json",
    "totals_curve",
]
