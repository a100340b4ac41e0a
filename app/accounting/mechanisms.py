"""Mechanisms as small frozen value objects, each mapping to its tight ``PrivacyCurve``.

Every mechanism is validated on construction (finite, in range; ``ValueError`` naming the bad
value) and carries ``count`` (repetitions, default 1), which multiplies its curve. A ledger row
stores the mechanism's JSON with ``"v": 1``; ``mechanism_from_dict`` reads it back. Like
dp_accounting's ``DpEvent`` types, a kind is never removed or given a new meaning; new
parameters are optional.

Each kind lives in its own module of ``app.accounting.kinds`` (adding a kind is one module plus
its tests); this module re-exports the value objects and what is derived from the registry.
"""

from __future__ import annotations

from app.accounting.kinds._spec import (
    MAX_COUNT,
    MAX_EPSILON,
    MAX_K,
    MAX_RATIO,
    MAX_SCALE,
    MIN_EPSILON,
    MIN_RATIO,
    MIN_SCALE,
    RDP_EVAL_MARGIN,
    Mechanism,
)
from app.accounting.kinds.discrete_laplace import DiscreteLaplace
from app.accounting.kinds.gaussian import Gaussian
from app.accounting.kinds.laplace import Laplace
from app.accounting.kinds.randomized_response import RandomizedResponse
from app.accounting.kinds.rappor import Rappor
from app.accounting.kinds.subsampled_gaussian import SubsampledGaussian
from app.accounting.registry import MECHANISMS, mechanism_from_dict

__all__ = [
    "MAX_COUNT",
    "MAX_EPSILON",
    "MAX_K",
    "MAX_RATIO",
    "MAX_SCALE",
    "MECHANISMS",
    "MIN_EPSILON",
    "MIN_RATIO",
    "MIN_SCALE",
    "RDP_EVAL_MARGIN",
    "DiscreteLaplace",
    "Gaussian",
    "Laplace",
    "Mechanism",
    "RandomizedResponse",
    "Rappor",
    "SubsampledGaussian",
    "mechanism_from_dict",
]
