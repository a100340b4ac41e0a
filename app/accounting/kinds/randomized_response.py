"""``randomized_response``: k-ary randomized response (local model)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from app.accounting.closed_forms import binary_rr_rho_array, rho_from_curves, rr_kl, rr_rdp
from app.accounting.curve import Vector
from app.accounting.kinds._events import DpEventError, at, epsilon_in_range, number, outside, sign
from app.accounting.kinds._spec import (
    MAX_EPSILON,
    MAX_K,
    MIN_EPSILON,
    KindSpec,
    Mechanism,
    NextQuery,
    Translate,
    UnitCurves,
    event_number,
    param,
)
from app.accounting.orders import ORDERS
from app.accounting.rounding import div_up, mul_up, sub_up, up


@dataclass(frozen=True, slots=True)
class RandomizedResponse(Mechanism):
    """k-ary randomized response: report the true value w.p. e^eps / (e^eps + k - 1), each other
    value w.p. 1 / (e^eps + k - 1). Neighbours: the single input changes (local model).

    RDP: exact divergence of the two categorical outputs [M17 Table II; = dp_accounting
    ``RandomizedResponseDpEvent(noise_parameter = k / (e^eps + k - 1), k)`` under REPLACE_ONE].
    zCDP: eps tanh(eps/2) for k = 2 [S24 Thm 5]; the KL value eps (e^eps - 1) / (e^eps + k - 1)
    for k <= 6 [HM25]; for k >= 7 the KL value is not a valid rho (docs/formulas.md §1.5), so rho is
    the numerical supremum of eps(alpha) / alpha with a 1e-9 relative margin.
    """

    kind: ClassVar[str] = "randomized_response"
    epsilon: float = param(
        help="Randomization parameter: the true value is kept w.p. e^eps / (e^eps + k - 1).",
        minimum=MIN_EPSILON,
        maximum=MAX_EPSILON,
    )
    k: int = param(
        default=2, help="Number of possible values (2: binary).", minimum=2, maximum=MAX_K
    )

    def rho(self) -> float:
        """The tight (k <= 6) or numerically located (k >= 7) zCDP parameter."""
        return float(_rho(np.array([self.epsilon]), np.array([self.k]))[0])

    @classmethod
    def _raw_curves(cls, units: Sequence[RandomizedResponse]) -> UnitCurves:
        eps = np.array([u.epsilon for u in units])
        k = np.array([u.k for u in units], dtype=np.float64)
        return UnitCurves.of(_rho(eps, k), rr_rdp(ORDERS, eps[:, None], k[:, None]), eps)


def _rho(eps: Vector, k: Vector) -> Vector:
    """``RandomizedResponse.rho`` of each (eps, k), the numerical suprema (k >= 7) located
    together (``rho_from_curves``: the same numbers as one by one)."""
    out = binary_rr_rho_array(eps)  # k = 2
    for j in np.flatnonzero((k > 2) & (k <= 6)):
        out[j] = rr_kl(float(eps[j]), int(k[j]))
    big = np.flatnonzero(k >= 7)
    if big.size:
        e, kk = eps[big, None], k[big, None]
        kl = np.array([rr_kl(float(x), int(y)) for x, y in zip(e[:, 0], kk[:, 0], strict=True)])

        def curve(a: Vector) -> Vector:
            return rr_rdp(a, e, kk)

        out[big] = rho_from_curves(curve, kl, e[:, 0])
    return out


def rr_epsilon(p: float, k: float) -> float:
    """The epsilon of ``RandomizedResponseDpEvent(noise_parameter p, num_buckets k)``, 0 < p <= 1:
    the true value w.p. 1 - p + p / k, each other w.p. p / k, so eps = log1p(k (1 - p) / p),
    never below it. ``log(k / p - k + 1)`` lost up to ~3e-9 of eps to cancellation for p near 1;
    here the argument is rounded up step by step (an upper bound on the exact one), log1p is
    monotone and within an ulp of exact (glibc), and one more ulp covers that."""
    return up(math.log1p(div_up(mul_up(sub_up(1.0, p), k), p)), 2)


def _from_rr_event(event: Mapping[str, Any], translate: Translate) -> list[Mechanism]:
    """``RandomizedResponseDpEvent(noise_parameter p, num_buckets k)``: with probability p a
    uniform value, so eps = log(k / p - k + 1) (dp_accounting's REPLACE_ONE semantics;
    ``rr_epsilon``)."""
    p = event_number(event, "noise_parameter")
    k = event_number(event, "num_buckets")
    if not (0 < p <= 1 and k >= 2 and float(k).is_integer()):
        raise ValueError(
            f"RandomizedResponseDpEvent(noise_parameter={p}, num_buckets={k}) has no translation"
        )
    if p == 1:
        return []  # uniform output: no privacy cost
    return [RandomizedResponse(epsilon=rr_epsilon(p, k), k=int(k))]


def _check_rr_event(event: Mapping[str, Any], path: str, depth: int) -> Mapping[str, Any]:
    """p a probability, k an integer >= 2 in k's range, and the epsilon they give in its."""
    where = at("RandomizedResponseDpEvent", path)
    p, k = number(event, "noise_parameter"), number(event, "num_buckets")
    if p is None or k is None:
        return event
    sign(where, "noise_parameter", p, path, zero="never answers uniformly: not private")
    if p > 1:
        raise DpEventError(
            f"{where}: noise_parameter {p!r} is above 1 (it is the probability of a uniform "
            "answer)",
            path,
        )
    sign(where, "num_buckets", k, path)
    if k < 2 or not k.is_integer():
        raise DpEventError(f"{where}: num_buckets {k!r} must be an integer >= 2", path)
    if p < 1:  # (1: a uniform answer, charged as nothing)
        why = outside(SPEC.param("k"), k)
        if why is not None:
            raise DpEventError(f"{where}: num_buckets {k!r} is {why}", path)
        epsilon_in_range(
            where,
            f"noise_parameter {p!r} with num_buckets {k:g}",
            SPEC.param("epsilon"),
            rr_epsilon(p, k),
            path,
        )
    return event


SPEC = KindSpec(
    mechanism=RandomizedResponse,
    description="k-ary randomized response: each user reports a randomized version of a value.",
    neighbours="One user's value changes (local model).",
    pld="randomized_response",
    calibration={"epsilon": "max"},
    dp_events={"RandomizedResponseDpEvent": _from_rr_event},
    dp_event_checks={"RandomizedResponseDpEvent": _check_rr_event},
    pure_calibration=True,
    title="Randomized response",
    next_query=NextQuery({"k": 2}, "k = 2 answers"),
    examples=KindSpec.Examples(
        valid=({"epsilon": 1.0, "k": 4}, {"epsilon": 0.1, "k": 3}),
        edges=({"epsilon": 1e-6, "k": 2}, {"epsilon": 8.0, "k": 100}),
        calibration={"epsilon": ({"k": 5, "count": 2}, {"k": 2}, {"k": 10**6})},
    ),
)
