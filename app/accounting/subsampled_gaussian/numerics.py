"""What every bound of the subsampled Gaussian's RDP shares: float64's unit roundoff, the work
counters, blocks of temporaries, and the log tables of the integer orders."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import numpy.typing as npt
from scipy import special

from app.accounting.orders import INTEGER_MASK, ORDERS

Vector = npt.NDArray[np.float64]
IntVector = npt.NDArray[np.int64]
Mask = npt.NDArray[np.bool_]

U = 2.0**-53
"""Unit roundoff of float64."""


@dataclass
class Work:
    """What computing a batch of curves cost: series and sum terms evaluated, point
    evaluations of the term function (bisections, window edges)."""

    terms: int = 0
    evaluations: int = 0


@lru_cache(maxsize=1)
def log_factorials() -> Vector:
    """log n! for n = 0 .. the largest integer order (computed once)."""
    n = int(ORDERS[INTEGER_MASK].max())
    out: Vector = special.gammaln(np.arange(n + 1, dtype=np.float64) + 1.0)
    out.setflags(write=False)
    return out


@lru_cache(maxsize=1)
def log_integers() -> Vector:
    """log n for n = 0 .. the largest integer order + 1 (-inf at 0; computed once): the values
    np.log gives for each, looked up instead of evaluated in the bisections."""
    n = int(ORDERS[INTEGER_MASK].max()) + 1
    with np.errstate(divide="ignore"):
        out: Vector = np.log(np.arange(n + 1, dtype=np.float64))
    out.setflags(write=False)
    return out


BLOCK = 12_288
"""Elements of the large temporaries computed at once (the exact terms of the integer orders, the
Taylor bound's (curve, order, k) arrays, the signed series' (row, term) arrays): 96 kB of
float64, under glibc's default mmap threshold (128 kB), so that the many temporaries reuse heap
memory instead of each faulting in fresh pages (which took about half the time of a chunk of 16
curves). Every block's values are those the whole chunk at once gave: each window, curve and
row is computed on its own."""


def blocks(rows: int, per_row: int) -> Iterator[slice]:
    """Consecutive slices of ``rows`` rows whose temporaries of ``per_row`` elements a row hold
    about ``BLOCK`` elements (at least one row each)."""
    step = max(1, BLOCK // per_row)
    return (slice(j, j + step) for j in range(0, rows, step))
