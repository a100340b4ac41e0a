"""How curves are stored: RDP vectors and held sums as little-endian bytes over the order grid.

Every stored vector is tied to the grid version written beside it (``orders_version``); a
vector written for another grid is refused rather than misread.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

from app.accounting.curve import PrivacyCurve, Vector
from app.accounting.orders import ORDERS, ORDERS_VERSION
from app.accounting.running import RunningSum

_N = ORDERS.size
_HEADER = struct.Struct("<qdqdqqd")  # count, rho, rho_inf, pure_eps, pure_inf, non_gaussian, delta


def _check_version(orders_version: int) -> None:
    if orders_version != ORDERS_VERSION:
        raise RuntimeError(
            f"stored curve uses order grid v{orders_version}, this build uses v{ORDERS_VERSION}; "
            "run the migration that rebuilds totals"
        )


def rdp_to_bytes(rdp: Vector) -> bytes:
    """Little-endian float64 bytes of an RDP vector (exact round trip)."""
    return np.asarray(rdp, dtype="<f8").tobytes()


def rdp_from_bytes(data: bytes, orders_version: int) -> Vector:
    """The stored vector; refuses vectors written for another order grid."""
    _check_version(orders_version)
    v = np.frombuffer(data, dtype="<f8")
    if v.shape != ORDERS.shape:
        raise RuntimeError(f"stored curve has {v.size} orders, expected {_N}")
    return v.astype(np.float64)


def curve_of(row: Any) -> PrivacyCurve:
    """The curve stored on a ledger entry, reservation or totals row (attributes ``rho``,
    ``rdp``, ``pure_eps``, ``gaussian_only``, ``delta``, ``orders_version``)."""
    return PrivacyCurve(
        rho=row.rho,
        rdp=rdp_from_bytes(row.rdp, row.orders_version),
        pure_eps=row.pure_eps,
        gaussian_only=row.gaussian_only,
        delta=row.delta,
    )


def curve_columns(curve: PrivacyCurve) -> dict[str, Any]:
    """The column values that store ``curve`` (for an insert or update)."""
    return {
        "rho": curve.rho,
        "rdp": rdp_to_bytes(curve.rdp),
        "pure_eps": curve.pure_eps,
        "gaussian_only": curve.gaussian_only,
        "delta": curve.delta,
        "orders_version": ORDERS_VERSION,
    }


def held_to_bytes(held: RunningSum) -> bytes | None:
    """A held sum as bytes (None for the empty sum)."""
    if held.count == 0:
        return None
    head = _HEADER.pack(
        held.count,
        held.rho,
        held.rho_inf,
        held.pure_eps,
        held.pure_inf,
        held.non_gaussian,
        held.delta,
    )
    return head + rdp_to_bytes(held.rdp) + np.asarray(held.rdp_inf, dtype="<i8").tobytes()


def held_from_bytes(data: bytes | None, orders_version: int) -> RunningSum:
    """The held sum stored by ``held_to_bytes`` (the empty sum for None)."""
    if data is None:
        return RunningSum()
    _check_version(orders_version)
    if len(data) != _HEADER.size + 16 * _N:
        raise RuntimeError(
            f"stored held sum has {len(data)} bytes, expected {_HEADER.size + 16 * _N}"
        )
    count, rho, rho_inf, pure_eps, pure_inf, non_gaussian, delta = _HEADER.unpack_from(data)
    body = memoryview(data)[_HEADER.size :]
    return RunningSum(
        count=count,
        rho=rho,
        rho_inf=rho_inf,
        rdp=np.frombuffer(body[: 8 * _N], dtype="<f8").astype(np.float64),
        rdp_inf=np.frombuffer(body[8 * _N :], dtype="<i8").astype(np.int64),
        pure_eps=pure_eps,
        pure_inf=pure_inf,
        non_gaussian=non_gaussian,
        delta=delta,
    )


__all__ = [
    "curve_columns",
    "curve_of",
    "held_from_bytes",
    "held_to_bytes",
    "rdp_from_bytes",
    "rdp_to_bytes",
]
