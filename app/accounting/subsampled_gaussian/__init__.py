"""RDP of the Poisson-subsampled Gaussian mechanism (DP-SGD), with bounded work and sound rounding.

Setting (docs/formulas.md §1.8): each record is included independently with probability q, the
contributions are clipped, N(0, sigma^2) noise is added (sigma = noise multiplier); neighbours
add or remove one record. The worst pair is one-dimensional: mu0 = N(0, sigma^2),
mu = (1 - q) mu0 + q N(1, sigma^2), and eps(alpha) = log(A_alpha) / (alpha - 1) with
A_alpha = E_{mu0}[(1 - q + q L)^alpha], L = mu1 / mu0 [MTZ19 section 3]. Every value returned is
an upper bound on eps(alpha); work per curve is bounded (counted in ``Work``).

One module per bound, combined by ``batch.rdp_batch``:

* ``integer_orders``: the exact binomial sum at integer orders [MTZ19 section 3.3 case I], on
  windows around its peaks, the terms left out bounded;
* ``signed_series``: the signed series of MTZ19 case II at fractional orders (below 11);
* ``taylor_bound``: the Taylor bound in q (L - 1) at fractional orders, tight where sigma is
  large;
* ``batch``: the bounds combined, with the chord of the neighbouring integer orders and the
  Gaussian without subsampling, and RDP's monotonicity in the order;
* ``numerics``: unit roundoff, work counters, blocks of temporaries, log tables.

Measured looser than the above says (sound, above the mpmath value; an audit at stop 40):
integer orders from about 38,000 up carry up to 2.3e-9 more than the alpha e^-DROP window bound
(the bounded tails of two pieces add up there); at fractional orders the rounding bound on the
series head has an absolute floor of about 8.6e-16 on A, which is about 1e-5 of eps, relative,
where A - 1 is itself tiny (q = 1.5e-5, sigma = 0.49, alpha = 1.01: +1.3e-5 against mpmath's
quadrature) and up to a few 1e-6 at q near 1 with a huge sigma.

Edge cases: q = 0 gives 0 (the kind refuses it); q = 1 is the Gaussian mechanism, handled by
the kind. A value that would underflow to 0 while q > 0 is returned as the least positive float.
"""

from __future__ import annotations

from app.accounting.subsampled_gaussian.batch import (
    rdp_batch,
    subsampled_gaussian_rdp,
    subsampled_gaussian_rdp_at,
    subsampled_gaussian_rdp_window,
)
from app.accounting.subsampled_gaussian.integer_orders import DROP, MAX_WINDOW, WINDOW_BUDGET
from app.accounting.subsampled_gaussian.numerics import Mask, Vector, Work
from app.accounting.subsampled_gaussian.signed_series import SERIES_TERMS

__all__ = [
    "DROP",
    "MAX_WINDOW",
    "SERIES_TERMS",
    "WINDOW_BUDGET",
    "Mask",
    "Vector",
    "Work",
    "rdp_batch",
    "subsampled_gaussian_rdp",
    "subsampled_gaussian_rdp_at",
    "subsampled_gaussian_rdp_window",
]
