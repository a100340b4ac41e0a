"""Arithmetic rounded toward +infinity, so that stored totals never under-state a loss.

A float sum ``fl(a + b)`` can be below the exact ``a + b`` by half an ulp; summed over a long
ledger those errors could turn into a false admission. ``add_up`` and ``mul_up`` return the
smallest float that is >= the exact result: Knuth's TwoSum and Dekker's TwoProduct give the
rounding error exactly, and we step one ulp up only when that error is positive. Exact
results (0.5 + 0.5) stay exact; after n additions the total exceeds the exact sum by at most
n ulps of the largest partial sum.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import math
import platform
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from fractions import Fraction
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

FloatOrArray = TypeVar("FloatOrArray", float, npt.NDArray[np.float64])

_SPLITTER = 134217729.0  # 2**27 + 1, Veltkamp splitting for float64


def add_up(a: FloatOrArray, b: FloatOrArray) -> FloatOrArray:
    """Smallest float >= a + b (TwoSum; Knuth, TAOCP vol. 2, 4.2.2)."""
    if isinstance(a, float) and isinstance(b, float):  # scalars: the same steps without numpy
        return _add_up_float(float(a), float(b))  # type: ignore[return-value,unused-ignore]
    with np.errstate(invalid="ignore", over="ignore"):
        x = np.asarray(a, dtype=np.float64)
        y = np.asarray(b, dtype=np.float64)
        s = x + y
        bb = s - x
        err = (x - (s - bb)) + (y - bb)
        out = np.where(err > 0, np.nextafter(s, np.inf), s)
    if isinstance(a, float) and isinstance(b, float):
        return float(out)  # type: ignore[return-value,unused-ignore]
    return out  # type: ignore[return-value,unused-ignore]


def _add_up_float(x: float, y: float) -> float:
    """``add_up`` of two Python floats: TwoSum in IEEE double, as numpy computes it (an
    infinite or NaN sum is returned as is: its error term is NaN)."""
    s = x + y
    if not math.isfinite(s):
        return s
    bb = s - x
    err = (x - (s - bb)) + (y - bb)
    return math.nextafter(s, math.inf) if err > 0 else s


def sub_up(a: FloatOrArray, b: FloatOrArray) -> FloatOrArray:
    """Smallest float >= a - b."""
    return add_up(a, -b)


def sub_down(a: float, b: float) -> float:
    """Largest float <= a - b."""
    return -add_up(-a, b)


def _split(a: npt.NDArray[np.float64]) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    c = _SPLITTER * a
    hi = c - (c - a)
    return hi, a - hi


def mul_up(a: FloatOrArray, b: float | npt.NDArray[np.float64]) -> FloatOrArray:
    """Smallest float >= a * b (Dekker's TwoProduct), for finite values below ~1e290 (``b``
    may be an array broadcast with ``a``)."""
    with np.errstate(invalid="ignore", over="ignore"):
        x = np.asarray(a, dtype=np.float64)
        y = np.asarray(b, dtype=np.float64)
        p = x * y
        xh, xl = _split(x)
        yh, yl = _split(np.asarray(y))
        err = ((xh * yh - p) + xh * yl + xl * yh) + xl * yl
        out = np.where(np.isfinite(p) & (err > 0), np.nextafter(p, np.inf), p)
    if isinstance(a, float):
        return float(out)  # type: ignore[return-value,unused-ignore]
    return out  # type: ignore[return-value,unused-ignore]


def div_up_array(a: npt.NDArray[np.float64], b: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """Smallest float >= a / b elementwise, for positive a and b whose quotient and the
    products below stay normal (no overflow, no subnormal). The residual a - q b of the
    rounded quotient q is decided exactly: q b = p + e (Dekker's TwoProduct), a - p is exact
    (Sterbenz: p is within an ulp of a), and the sign of (a - p) - e is that of a - q b."""
    q = a / b
    p = q * b
    qh, ql = _split(q)
    bh, bl = _split(b)
    e = ((qh * bh - p) + qh * bl + ql * bh) + ql * bl
    out: npt.NDArray[np.float64] = np.where((a - p) > e, np.nextafter(q, np.inf), q)
    return out


def div_up(a: float, b: float) -> float:
    """Smallest float >= a / b, for finite a and finite nonzero b (the quotient's rounding
    decided exactly, with rationals: for values translated once per request, not in a loop)."""
    q = a / b
    if math.isfinite(q) and Fraction(a) / Fraction(b) > Fraction(q):
        return math.nextafter(q, math.inf)
    return q


def up(x: float, ulps: int = 1) -> float:
    """``x`` moved ``ulps`` floats toward +infinity (a margin for a few-ulp evaluation error).
    An exact 0 stays 0 (a value computed as 0 from exact zeros needs no margin; where 0 stands
    for an underflow, use ``exp_up``)."""
    if x == 0.0:
        return 0.0
    for _ in range(ulps):
        x = float(np.nextafter(x, np.inf))
    return x


TINY = float(np.nextafter(0.0, 1.0))
"""The least positive float."""


def exp_up(log_value: float, ulps: int = 4) -> float:
    """An upper bound on e^log_value: ``ulps`` above exp's result, and the least positive float
    when a finite ``log_value`` underflows (never 0 for a positive value; 0 for -inf)."""
    if log_value == -math.inf:
        return 0.0
    return max(up(math.exp(min(log_value, 709.0)), ulps), TINY)


# --- the hardware's rounding toward +infinity ---------------------------------------------------

_FE_UPWARD = {"x86_64": 0x800, "amd64": 0x800, "aarch64": 0x400000, "arm64": 0x400000}
"""C99's FE_UPWARD of each architecture's <fenv.h> (glibc, musl, Apple's libm)."""

_UPWARD_WORKS: bool | None = None
_UPWARD_CHECK = threading.Lock()


def _fenv() -> tuple[Any, int] | None:
    """libm's fegetround / fesetround and FE_UPWARD here, or None where unknown."""
    mode = _FE_UPWARD.get(platform.machine().lower())
    name = ctypes.util.find_library("m")
    if mode is None or name is None:
        return None
    try:
        libm = ctypes.CDLL(name)
        libm.fegetround.restype = ctypes.c_int
        libm.fesetround.argtypes = [ctypes.c_int]
        libm.fesetround.restype = ctypes.c_int
    except (OSError, AttributeError):
        return None
    return libm, mode


_FENV = _fenv()


def _upward_checked() -> bool:
    """Whether numpy's float64 additions here round toward +infinity under FE_UPWARD and to
    nearest again once the mode is restored: checked once, on values whose exact sums are not
    floats, through numpy's vector loops (67 elements) and its scalar tail, both signs."""
    global _UPWARD_WORKS
    with _UPWARD_CHECK:
        if _UPWARD_WORKS is None:
            a = np.array([1.0, -1.0] * 33 + [1.0])
            b = np.full(a.size, 2.0**-60)
            want = np.nextafter(a, np.inf)  # a + 2^-60 is between a and the float above
            works = False
            if _FENV is not None:
                libm, mode = _FENV
                old = libm.fegetround()
                if libm.fesetround(mode) == 0:
                    try:
                        works = bool(np.array_equal(np.add(a, b), want))
                    finally:
                        libm.fesetround(old)
                    works = works and bool(np.array_equal(np.add(a, b), a))
            _UPWARD_WORKS = works
    return _UPWARD_WORKS


@contextmanager
def rounding_upward() -> Iterator[bool]:
    """This thread's IEEE 754 rounding mode set toward +infinity for the block (C99
    ``fesetround(FE_UPWARD)``; the mode is per thread), restored on exit. Yields False, and
    changes nothing, where that is not available or numpy's additions do not follow it
    (``_upward_checked``): the caller then rounds up in software (``add_up``). Keep the block to
    numpy additions: every float operation in it, Python's too, rounds up."""
    if not _upward_checked():
        yield False
        return
    assert _FENV is not None
    libm, mode = _FENV
    old = libm.fegetround()
    libm.fesetround(mode)
    try:
        yield True
    finally:
        libm.fesetround(old)


__all__ = [
    "TINY",
    "add_up",
    "div_up",
    "div_up_array",
    "exp_up",
    "mul_up",
    "rounding_upward",
    "sub_down",
    "sub_up",
    "up",
]
