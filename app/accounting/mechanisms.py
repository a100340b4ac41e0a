"""Mechanisms as small frozen value objects, each mapping to its tight ``PrivacyCurve``.

Every mechanism is validated on construction (finite, in range; ``ValueError`` naming the bad
value) and carries ``count`` (repetitions, default 1), which multiplies its curve. A ledger row
stores ``to_dict()`` with ``"v": 1``; ``mechanism_from_dict`` reads it back. Like
dp_accounting's ``DpEvent`` types, a kind is never removed or given a new meaning; new
parameters are optional.

Adding a mechanism: one dataclass here (with ``kind``, validation and ``_unit_curve``), its
formula in ``closed_forms``, and its tests.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from typing import Any, ClassVar

import numpy as np

from app.accounting.closed_forms import (
    binary_rr_rho,
    discrete_laplace_kl,
    discrete_laplace_rdp,
    gaussian_rho,
    laplace_rdp,
    laplace_rho,
    rappor_rdp,
    rappor_rho,
    rho_from_curve,
    rr_kl,
    rr_rdp,
)
from app.accounting.curve import PrivacyCurve
from app.accounting.orders import ORDERS
from app.accounting.subsampled_gaussian import subsampled_gaussian_rdp

# Ranges: wide enough for any real use, narrow enough that no formula over- or underflows
# (a curve that rounds to 0 or inf would be a silent clamp).
MAX_COUNT = 1_000_000_000
MIN_SCALE, MAX_SCALE = 1e-6, 1e12  # sigma, Laplace scale, sensitivity
MIN_EPSILON, MAX_EPSILON = 1e-9, 100.0  # pure-DP epsilon of one invocation
MAX_K = 1_000_000_000
MIN_RATIO, MAX_RATIO = 1e-12, 1e6  # sensitivity / sigma for the Gaussian


def _check_number(name: str, value: object, lo: float, hi: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{name} must be a number, got {value!r}")
    v = float(value)
    if not math.isfinite(v):
        raise ValueError(f"{name} must be finite, got {value!r}")
    if not lo <= v <= hi:
        raise ValueError(f"{name} must be in [{lo:g}, {hi:g}], got {value!r}")
    return v


def _check_int(name: str, value: object, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise ValueError(f"{name} must be an integer, got {value!r}")
    if not lo <= value <= hi:
        raise ValueError(f"{name} must be an integer in [{lo}, {hi}], got {value!r}")
    return value


@dataclass(frozen=True)
class Mechanism:
    """Base class: a mechanism invocation repeated ``count`` times."""

    kind: ClassVar[str] = ""
    count: int = field(default=1, kw_only=True)

    def __post_init__(self) -> None:
        object.__setattr__(self, "count", _check_int("count", self.count, 1, MAX_COUNT))

    def curve(self) -> PrivacyCurve:
        """The composed curve of ``count`` repetitions."""
        return _unit_curve_cached(self.unit()).scaled(self.count)

    def unit(self) -> Mechanism:
        """The same mechanism with count 1 (the cache key for its curve)."""
        data = asdict(self)
        data["count"] = 1
        return type(self)(**data)

    def _unit_curve(self) -> PrivacyCurve:
        raise NotImplementedError

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready description: ``{"mechanism": kind, **parameters, "count": n}``."""
        return {"mechanism": self.kind, **asdict(self)}


RDP_EVAL_MARGIN = 2.0**-50
"""Relative margin (about 4 ulps) added to closed-form RDP values: they are evaluated to within
a few ulps, and the stored curve must never be below the true one."""


@lru_cache(maxsize=4096)
def _unit_curve_cached(mechanism: Mechanism) -> PrivacyCurve:
    curve = mechanism._unit_curve()
    if not curve.is_finite():
        raise ValueError(f"{mechanism.kind}: the privacy loss of these parameters overflows")
    return PrivacyCurve(
        rho=curve.rho,
        rdp=curve.rdp * (1.0 + RDP_EVAL_MARGIN),
        pure_eps=curve.pure_eps,
        gaussian_only=curve.gaussian_only,
    )


@dataclass(frozen=True)
class Gaussian(Mechanism):
    """Gaussian mechanism f(x) + N(0, sigma^2 I).

    Convention: ``sensitivity`` is the L2 sensitivity Delta under whatever neighbouring relation
    the caller uses (add/remove or replace-one; e.g. a histogram has Delta = 1 under add/remove,
    sqrt 2 under replace-one); ``sigma`` is the standard deviation of the noise (not the noise
    multiplier). rho = Delta^2 / (2 sigma^2) and eps(alpha) = alpha rho exactly
    [BS16 Lemma 16/17, Prop 6; M17 Table II]. Never pure DP.
    """

    kind: ClassVar[str] = "gaussian"
    sigma: float
    sensitivity: float = 1.0

    def __post_init__(self) -> None:
        super().__post_init__()
        sigma = _check_number("sigma", self.sigma, MIN_SCALE, MAX_SCALE)
        sens = _check_number("sensitivity", self.sensitivity, MIN_SCALE, MAX_SCALE)
        _check_number("sensitivity / sigma", sens / sigma, MIN_RATIO, MAX_RATIO)
        object.__setattr__(self, "sigma", sigma)
        object.__setattr__(self, "sensitivity", sens)

    def _unit_curve(self) -> PrivacyCurve:
        rho = gaussian_rho(self.sigma, self.sensitivity)
        return PrivacyCurve(rho=rho, rdp=ORDERS * rho, pure_eps=math.inf, gaussian_only=True)


@dataclass(frozen=True)
class Laplace(Mechanism):
    """Laplace mechanism f(x) + Lap(b)^d with epsilon = Delta / b (exactly epsilon-DP).

    Convention: ``epsilon`` = L1 sensitivity / scale, under the caller's neighbouring relation.
    RDP: Mironov's exact curve [M17 Prop 6]; tight zCDP rho = eps + e^{-eps} - 1 [HM25], not
    eps^2 / 2. The scalar formula is the worst case for product noise (FORMULAS.md 1.2).
    """

    kind: ClassVar[str] = "laplace"
    epsilon: float

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(
            self, "epsilon", _check_number("epsilon", self.epsilon, MIN_EPSILON, MAX_EPSILON)
        )

    @classmethod
    def from_scale(cls, scale: float, sensitivity: float = 1.0, count: int = 1) -> Laplace:
        """Laplace noise of scale ``scale`` on a query of L1 sensitivity ``sensitivity``."""
        b = _check_number("scale", scale, MIN_SCALE, MAX_SCALE)
        d = _check_number("sensitivity", sensitivity, MIN_SCALE, MAX_SCALE)
        return cls(epsilon=d / b, count=count)

    def _unit_curve(self) -> PrivacyCurve:
        eps = self.epsilon
        return PrivacyCurve(
            rho=laplace_rho(eps), rdp=laplace_rdp(ORDERS, eps), pure_eps=eps, gaussian_only=False
        )


@dataclass(frozen=True)
class RandomizedResponse(Mechanism):
    """k-ary randomized response: report the true value w.p. e^eps / (e^eps + k - 1), each other
    value w.p. 1 / (e^eps + k - 1). Neighbours: the single input changes (local model).

    RDP: exact divergence of the two categorical outputs [M17 Table II; = dp_accounting
    ``RandomizedResponseDpEvent(noise_parameter = k / (e^eps + k - 1), k)`` under REPLACE_ONE].
    zCDP: eps tanh(eps/2) for k = 2 [S24 Thm 5]; the KL value eps (e^eps - 1) / (e^eps + k - 1)
    for k <= 6 [HM25]; for k >= 7 the KL value is not a valid rho (FORMULAS.md 1.5), so rho is
    the numerical supremum of eps(alpha) / alpha with a 1e-9 relative margin.
    """

    kind: ClassVar[str] = "randomized_response"
    epsilon: float
    k: int = 2

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(
            self, "epsilon", _check_number("epsilon", self.epsilon, MIN_EPSILON, MAX_EPSILON)
        )
        object.__setattr__(self, "k", _check_int("k", self.k, 2, MAX_K))

    def _unit_curve(self) -> PrivacyCurve:
        eps, k = self.epsilon, self.k
        if k == 2:
            rho = binary_rr_rho(eps)
        elif k <= 6:
            rho = rr_kl(eps, k)
        else:
            rho = rho_from_curve(lambda a: rr_rdp(a, eps, k), rr_kl(eps, k), eps)
        return PrivacyCurve(rho=rho, rdp=rr_rdp(ORDERS, eps, k), pure_eps=eps, gaussian_only=False)


@dataclass(frozen=True)
class Rappor(Mechanism):
    """Basic one-time RAPPOR: one-hot encode v in [d], keep each bit w.p. e^{eps/2}/(1 + e^{eps/2}).

    Convention (CH24, consistent with EPK14's permanent RR): ``epsilon`` is the total for one
    user's value change v -> v' (two bits differ), so the mechanism is exactly eps-DP. RDP is
    twice the binary-RR curve at eps/2, independent of d [CH24 Thm 1]; rho = eps tanh(eps/4)
    [CH24 Thm 4; HM25].
    """

    kind: ClassVar[str] = "rappor"
    epsilon: float

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(
            self, "epsilon", _check_number("epsilon", self.epsilon, MIN_EPSILON, MAX_EPSILON)
        )

    def _unit_curve(self) -> PrivacyCurve:
        eps = self.epsilon
        return PrivacyCurve(
            rho=rappor_rho(eps), rdp=rappor_rdp(ORDERS, eps), pure_eps=eps, gaussian_only=False
        )


@dataclass(frozen=True)
class SubsampledGaussian(Mechanism):
    """Poisson-subsampled Gaussian (DP-SGD): ``steps`` steps, each including every record with
    probability ``sample_rate``, clipping to norm C and adding N(0, sigma^2 C^2).

    Convention: ``sigma`` is the noise multiplier (noise std / clipping norm); neighbours add or
    remove one record (replace-one is not covered). RDP: the exact MTZ19 series at integer and
    fractional orders (``subsampled_gaussian``). rho = steps / (2 sigma^2): zCDP gets no
    amplification from subsampling, so rho is valid but loose: use RDP accounting for DP-SGD.
    """

    kind: ClassVar[str] = "subsampled_gaussian"
    sigma: float
    sample_rate: float
    steps: int = 1

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "sigma", _check_number("sigma", self.sigma, 1e-3, 1e6))
        object.__setattr__(
            self, "sample_rate", _check_number("sample_rate", self.sample_rate, 0.0, 1.0)
        )
        if self.sample_rate == 0.0:
            raise ValueError("sample_rate must be > 0, got 0")
        object.__setattr__(self, "steps", _check_int("steps", self.steps, 1, MAX_COUNT))

    def unit(self) -> Mechanism:
        return SubsampledGaussian(sigma=self.sigma, sample_rate=self.sample_rate, steps=1)

    def curve(self) -> PrivacyCurve:
        total = self.steps * self.count
        if total > MAX_COUNT:
            raise ValueError(f"steps * count must be <= {MAX_COUNT}, got {total}")
        return _unit_curve_cached(self.unit()).scaled(total)

    def _unit_curve(self) -> PrivacyCurve:
        rdp = subsampled_gaussian_rdp(self.sample_rate, self.sigma)
        rho = gaussian_rho(self.sigma, 1.0)
        return PrivacyCurve(rho=rho, rdp=rdp, pure_eps=math.inf, gaussian_only=False)


@dataclass(frozen=True)
class DiscreteLaplace(Mechanism):
    """Discrete Laplace on Z: Pr[Z = z] = tanh(t/2) e^{-t|z|}, t = epsilon / Delta (eps-DP).

    Convention: integer-valued query with integer L1 ``sensitivity`` Delta; worst neighbour pair
    shifts by exactly Delta. RDP: closed form of FORMULAS.md 1.3 (Delta = 1 is binary RR).
    rho: the KL value eps - t (1 - e^{-eps}) / sinh t (the supremum is the alpha -> 1 limit,
    checked numerically for every instance; a larger interior value would be used instead).
    """

    kind: ClassVar[str] = "discrete_laplace"
    epsilon: float
    sensitivity: int = 1

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(
            self, "epsilon", _check_number("epsilon", self.epsilon, MIN_EPSILON, MAX_EPSILON)
        )
        object.__setattr__(
            self, "sensitivity", _check_int("sensitivity", self.sensitivity, 1, MAX_K)
        )

    def _unit_curve(self) -> PrivacyCurve:
        eps, delta_1 = self.epsilon, self.sensitivity
        kl = discrete_laplace_kl(eps, delta_1)
        if delta_1 == 1:
            rho = binary_rr_rho(eps)
        else:
            # the formula loses precision as alpha -> 1 (absolute 1e-16 / (alpha - 1)), so the
            # scan starts at alpha = 1 + 1e-4, where f is within 1e-4 relative of the KL limit
            rho = rho_from_curve(
                lambda a: discrete_laplace_rdp(a, eps, delta_1, margin=False), kl, eps, 1e-4
            )
        rdp = discrete_laplace_rdp(ORDERS, eps, delta_1)
        # eps(alpha) <= eps for an eps-DP mechanism; the cap keeps the margin from exceeding it
        cap = eps / (1.0 + RDP_EVAL_MARGIN)
        return PrivacyCurve(rho=rho, rdp=np.minimum(rdp, cap), pure_eps=eps, gaussian_only=False)


MECHANISMS: dict[str, type[Mechanism]] = {
    cls.kind: cls
    for cls in (Gaussian, Laplace, RandomizedResponse, Rappor, SubsampledGaussian, DiscreteLaplace)
}
"""Every mechanism kind, by its wire name."""


def mechanism_from_dict(data: dict[str, Any]) -> Mechanism:
    """Build a mechanism from its JSON description (``{"mechanism": kind, ...}``).

    Laplace may be given as ``epsilon`` or as ``scale`` (+ ``sensitivity``). Unknown kinds or
    fields raise ``ValueError``.
    """
    params = dict(data)
    params.pop("v", None)
    kind = params.pop("mechanism", None)
    if kind not in MECHANISMS:
        raise ValueError(f"unknown mechanism {kind!r}; known: {', '.join(sorted(MECHANISMS))}")
    if kind == "laplace" and "scale" in params:
        if "epsilon" in params:
            raise ValueError("laplace takes either epsilon or scale (+ sensitivity), not both")
        scale = params.pop("scale")
        sensitivity = params.pop("sensitivity", 1.0)
        count = params.pop("count", 1)
        if params:
            raise ValueError(f"laplace: unexpected fields {sorted(params)}")
        return Laplace.from_scale(scale, sensitivity, count=count)
    if kind == "laplace" and "sensitivity" in params:
        raise ValueError("laplace: give epsilon (= sensitivity / scale) or scale + sensitivity")
    try:
        return MECHANISMS[kind](**params)
    except TypeError as exc:
        raise ValueError(f"{kind}: {exc}") from None


__all__ = [
    "MECHANISMS",
    "DiscreteLaplace",
    "Gaussian",
    "Laplace",
    "Mechanism",
    "RandomizedResponse",
    "Rappor",
    "SubsampledGaussian",
    "mechanism_from_dict",
]
