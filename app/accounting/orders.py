"""The fixed grid of Renyi orders on which every RDP curve is stored and composed.

``ORDERS`` = dp_accounting's ``DEFAULT_RDP_ORDERS`` (1.1, 1.2, ..., 10.9, 11, ..., 63, 128,
256, 512, 1024) united with ``round(64 * 1.1**k)`` for k >= 0 up to 1e5 (docs/formulas.md §2.5) and
with 1.01, 1.02, ..., 1.09: 243 orders (version 2; version 1 had 234, without 1.01 .. 1.09).

* Containing every default dp_accounting order means the improved RDP conversion on our grid
  is never looser than dp_accounting's ``RdpAccountant`` on the same curve.
* The geometric tail reaches the large orders that small per-run rho (few steps, large
  sigma, tiny delta) needs: worst excess over the continuum optimum 0.39 % for
  rho in [1e-7, 100] and delta in {1e-5, 1e-9, 1e-12} (docs/formulas.md §2.5), where the
  dp_accounting default alone reaches several hundred percent at rho = 1e-7.
* The orders 1.01 .. 1.09 serve very large totals (composed epsilon in the hundreds or
  thousands, where the optimal order approaches 1 + sqrt(log(1/delta) / rho)): with 1.1 the
  smallest order, the conversion pays log(1/delta) / 0.1 at least.

Every order gives a valid bound; the grid only trades tightness. Stored vectors are tied to
this grid: ``ORDERS_VERSION`` is written beside every stored total, and changing the grid
needs a migration that rebuilds totals from the ledger.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

# dp_accounting rdp_privacy_accountant.DEFAULT_RDP_ORDERS, spelled the same way so that the
# floating-point values are bit-identical.
DPACC_DEFAULT_ORDERS: tuple[float, ...] = tuple(
    [1 + x / 10.0 for x in range(1, 100)]
    + [float(a) for a in range(11, 64)]
    + [128.0, 256.0, 512.0, 1024.0]
)

MAX_ORDER = 100_000.0


def _geometric_tail() -> list[float]:
    tail: list[float] = []
    k = 0
    while True:
        a = float(round(64 * 1.1**k))
        if a > MAX_ORDER:
            return tail
        tail.append(a)
        k += 1


NEAR_ONE: tuple[float, ...] = tuple(1 + x / 100.0 for x in range(1, 10))
"""1.01, 1.02, ..., 1.09 (added in version 2)."""


def _build() -> npt.NDArray[np.float64]:
    orders = set(DPACC_DEFAULT_ORDERS) | set(_geometric_tail()) | set(NEAR_ONE)
    grid = np.array(sorted(orders), dtype=np.float64)
    grid.setflags(write=False)
    return grid


ORDERS: npt.NDArray[np.float64] = _build()
"""The grid: sorted, unique, read-only float64 array, all orders > 1."""

ORDERS_VERSION = 2
"""Bump (with a migration rebuilding totals) whenever ``ORDERS`` changes. Version 1: 234 orders;
version 2: 243 (1.01 .. 1.09 added)."""

CURVE_FORMULAS_VERSION = 4
"""Bump whenever a mechanism's curve formula changes (a correction found below the exact value,
or a tightening): a database written before re-derives its stored curves from their mechanisms
and rebuilds its totals once, at the first ``migrate`` or auto-migrating start-up of the release
that bumps it (``app.services.verification.rederive_if_formulas_changed``). Version 1: the formulas
of 2026-11-24 (discrete Laplace margin 2556fc4, DP-SGD series ff22b6b / 4e9a4c1 / 3942eb9); a
database without the stamp was written before them, or by a release that did not keep it.
Version 2 (2026-11-25): the exponential mechanism's RDP is the exact bounded-range curve
(``closed_forms.bounded_range_rdp``), up to 1.5x below version 1's at some orders; an ``rdp``
entry whose given epsilons decrease takes the next given order's own value at each grid order
(version 1 took the least value at or above it).
Version 3 (2026-11-25), two reasons. First, version 2 was first stamped by the release of
79396bd, before that ``rdp`` reading (c97fd72) joined it: a database that release wrote is
stamped 2 with the older, lower reading of such entries, and version 3 re-derives it (the pass
rewrites only curves that differ). Second, k-ary randomized response (k >= 7) and discrete
Laplace take the KL value as rho only where no located value of eps(alpha) / alpha is above it
(``closed_forms.rho_from_curves``); version 2 took it wherever the located maximum was within
1e-12 of it, which returned the KL value, below the exact rho*, for an interior maximum barely
above the limit (k = 7 just below eps = 0.4367475: 1.1e-13 below). Those rhos rise by 1e-9,
as do the few whose located maximum rounding puts 1e-14 above the KL value (22 of 2,000 k = 7
mechanisms with eps in [1, 100]).
Version 4 (2026-11-26): ``approx_dp`` with an epsilon below about 1e-154 (it takes any epsilon
>= 0; every other kind's least epsilon is 1e-9) had rho and RDP values that underflowed to 0 or
were subnormal with too few bits for their relative margins (eps = 1e-200: rho and every RDP
value 0, the delta reported at epsilon 0 was 0 against tanh(eps / 2) = 5e-201). Such curves now
stay above the exact ones (``closed_forms.rr_rdp``, ``binary_rr_rho_array``); no other curve
changes.
``tests/unit/test_curve_formulas_version.py`` fails when a curve moves beyond ``verify``'s
tolerance while this stays the same."""

INTEGER_MASK: npt.NDArray[np.bool_] = np.equal(np.floor(ORDERS), ORDERS)
"""True where the order is an integer (the subsampled Gaussian uses a different series)."""

__all__ = [
    "CURVE_FORMULAS_VERSION",
    "DPACC_DEFAULT_ORDERS",
    "INTEGER_MASK",
    "MAX_ORDER",
    "NEAR_ONE",
    "ORDERS",
    "ORDERS_VERSION",
]
