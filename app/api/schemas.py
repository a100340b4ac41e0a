"""Request schemas (Pydantic v2). Responses are plain dicts built by the services.

Numbers must be finite JSON numbers of the right type (strict mode: no strings, no booleans);
ranges are checked by the accounting core's constructors so that every rule lives in one
place, and a violation becomes a 422 naming the bad value. Unknown fields are refused.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from app.accounting import mechanisms as mech
from app.accounting.filters import MAX_BUDGET_EPSILON, MIN_BUDGET_DELTA
from app.accounting.mechanisms import MAX_COUNT, Mechanism, mechanism_from_dict
from app.api.dataset_names import DatasetName
from app.api.safe_text import SafeText, check_json_tree

FiniteFloat = Annotated[float, Field(allow_inf_nan=False)]
Count = Annotated[int, Field(ge=1, le=MAX_COUNT, description="Repetitions of the mechanism.")]
# single-field ranges, published in the OpenAPI schema; cross-field rules (sensitivity / sigma,
# steps * count) are checked by the accounting core and answered with 422 as well
Scale = Annotated[float, Field(ge=mech.MIN_SCALE, le=mech.MAX_SCALE, allow_inf_nan=False)]
Epsilon = Annotated[float, Field(ge=mech.MIN_EPSILON, le=mech.MAX_EPSILON, allow_inf_nan=False)]
NoiseMultiplier = Annotated[float, Field(ge=1e-3, le=1e6, allow_inf_nan=False)]
MIN_SAMPLE_RATE = 2.0**-1022
"""Smallest sample rate accepted (the smallest normal float): below it 1/q overflows and one
subsampled-Gaussian curve took 13 s of CPU instead of 0.3 s."""


def at_least(minimum: float, why: str) -> Callable[[float], float]:
    """A validator refusing values below ``minimum`` with a message that names it (Pydantic's
    own ``ge`` message spells a tiny float out in 300 decimal digits)."""

    def check(value: float) -> float:
        if value < minimum:
            raise PydanticCustomError(
                "too_small",
                "must be >= {minimum} ({why}), got {value}",
                {"minimum": repr(minimum), "why": why, "value": repr(value)},
            )
        return value

    return check


SampleRate = Annotated[
    float,
    Field(gt=0, le=1, allow_inf_nan=False, json_schema_extra={"minimum": MIN_SAMPLE_RATE}),
    AfterValidator(at_least(MIN_SAMPLE_RATE, "the smallest normal float")),
]
Steps = Annotated[int, Field(ge=1, le=MAX_COUNT)]
Buckets = Annotated[int, Field(ge=2, le=mech.MAX_K)]
IntSensitivity = Annotated[int, Field(ge=1, le=mech.MAX_K)]

MAX_METADATA_BYTES = 16_384
MAX_METADATA_DEPTH = 8
MAX_LABEL = 200


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class _MechanismBase(_Strict):
    count: Count = 1
    _core: Mechanism | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _build_core(self) -> _MechanismBase:
        try:
            self._core = mechanism_from_dict(self.model_dump(exclude_none=True))
        except ValueError as exc:
            raise ValueError(str(exc)) from None
        return self

    @property
    def core(self) -> Mechanism:
        assert self._core is not None
        return self._core

    def wire(self) -> dict[str, Any]:
        """The mechanism as given (defaults filled in), for the ledger and answers."""
        return self.model_dump(exclude_none=True)


class GaussianIn(_MechanismBase):
    """Gaussian noise of standard deviation ``sigma`` on a query of L2 ``sensitivity``."""

    mechanism: Literal["gaussian"]
    sigma: Scale
    sensitivity: Scale = 1.0


class LaplaceIn(_MechanismBase):
    """Laplace noise: ``epsilon`` (= sensitivity / scale), or ``scale`` with L1 ``sensitivity``."""

    mechanism: Literal["laplace"]
    epsilon: Epsilon | None = None
    scale: Scale | None = None
    sensitivity: Scale | None = None

    @model_validator(mode="before")
    @classmethod
    def _one_form(cls, data: Any) -> Any:
        if isinstance(data, dict):
            has_eps, has_scale = data.get("epsilon") is not None, data.get("scale") is not None
            if has_eps == has_scale:
                raise ValueError(
                    "laplace takes exactly one of 'epsilon' or 'scale' (+ 'sensitivity')"
                )
            if has_eps and data.get("sensitivity") is not None:
                raise ValueError(
                    "laplace: 'sensitivity' goes with 'scale'; 'epsilon' already includes it"
                )
        return data


class RandomizedResponseIn(_MechanismBase):
    """k-ary randomized response with parameter ``epsilon`` (k = 2: binary)."""

    mechanism: Literal["randomized_response"]
    epsilon: Epsilon
    k: Buckets = 2


class RapporIn(_MechanismBase):
    """One-time RAPPOR; ``epsilon`` is the total for one user's value change."""

    mechanism: Literal["rappor"]
    epsilon: Epsilon


class SubsampledGaussianIn(_MechanismBase):
    """DP-SGD: ``steps`` Poisson-subsampled Gaussian steps with noise multiplier ``sigma``."""

    mechanism: Literal["subsampled_gaussian"]
    sigma: NoiseMultiplier
    sample_rate: SampleRate
    steps: Steps = 1


class DiscreteLaplaceIn(_MechanismBase):
    """Discrete Laplace on integers; ``sensitivity`` is an integer L1 sensitivity."""

    mechanism: Literal["discrete_laplace"]
    epsilon: Epsilon
    sensitivity: IntSensitivity = 1


MechanismIn = Annotated[
    GaussianIn
    | LaplaceIn
    | RandomizedResponseIn
    | RapporIn
    | SubsampledGaussianIn
    | DiscreteLaplaceIn,
    Field(discriminator="mechanism"),
]


def _depth(value: Any, level: int = 1) -> int:
    if isinstance(value, dict):
        return max([level] + [_depth(v, level + 1) for v in value.values()])
    if isinstance(value, list):
        return max([level] + [_depth(v, level + 1) for v in value])
    return level - 1 if level > 1 else 0


def check_metadata(value: dict[str, Any] | None) -> dict[str, Any] | None:
    if value is None:
        return None
    size = len(json.dumps(value, allow_nan=False, default=str))
    if size > MAX_METADATA_BYTES:
        raise ValueError(f"metadata is {size} bytes of JSON; the limit is {MAX_METADATA_BYTES}")
    depth = _depth(value)
    if depth > MAX_METADATA_DEPTH:
        raise ValueError(f"metadata nests {depth} levels deep; the limit is {MAX_METADATA_DEPTH}")
    return value


class _WithLabel(_Strict):
    label: Annotated[SafeText, Field(max_length=MAX_LABEL)] | None = None
    metadata: dict[str, Any] | None = None

    @field_validator("metadata", mode="before")
    @classmethod
    def _no_nan(cls, v: Any) -> Any:
        if v is not None:
            check_json_tree(v, "metadata")
            try:
                json.dumps(v, allow_nan=False)
            except ValueError:
                raise ValueError("metadata must not contain NaN or infinite numbers") from None
        return v

    @field_validator("metadata")
    @classmethod
    def _limits(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        return check_metadata(v)


class ChargeIn(_WithLabel):
    """``POST /v1/datasets/{id}/charges``."""

    mechanism: MechanismIn


class ReservationIn(_WithLabel):
    """``POST /v1/datasets/{id}/reservations``."""

    mechanism: MechanismIn
    ttl_seconds: Annotated[int, Field(ge=1)] = 600


Delta = Annotated[
    float,
    Field(gt=0, lt=1, allow_inf_nan=False, json_schema_extra={"minimum": MIN_BUDGET_DELTA}),
    AfterValidator(
        at_least(MIN_BUDGET_DELTA, "the smallest delta whose conversions stay finite and sound")
    ),
]


class BudgetIn(_Strict):
    epsilon: Annotated[float, Field(gt=0, le=MAX_BUDGET_EPSILON, allow_inf_nan=False)]
    delta: Delta


class BudgetPatch(_Strict):
    epsilon: Annotated[float, Field(gt=0, le=MAX_BUDGET_EPSILON, allow_inf_nan=False)] | None = None
    delta: Delta | None = None


Kind = Literal[
    "gaussian",
    "laplace",
    "randomized_response",
    "rappor",
    "subsampled_gaussian",
    "discrete_laplace",
]
Name = DatasetName
Description = Annotated[SafeText, Field(max_length=2000)]


class DatasetIn(_Strict):
    """``POST /v1/datasets``."""

    name: Name
    budget: BudgetIn
    accounting: Literal["rdp", "zcdp", "pld"] = "rdp"
    adaptive: bool = True
    allowed_mechanisms: Annotated[list[Kind], Field(min_length=1, max_length=16)] | None = None
    description: Description | None = None


class DatasetPatch(_Strict):
    """``PATCH /v1/datasets/{id}``: budget and description (rules only before the first charge)."""

    name: Name | None = None
    budget: BudgetPatch | None = None
    description: Description | None = None
    accounting: Literal["rdp", "zcdp", "pld"] | None = None
    adaptive: bool | None = None
    allowed_mechanisms: Annotated[list[Kind], Field(min_length=1, max_length=16)] | None = None
    warning_threshold: (
        Annotated[
            float,
            Field(
                gt=0,
                le=1,
                allow_inf_nan=False,
                description="fraction of the budget epsilon at which the state turns warning",
            ),
        ]
        | None
    ) = None


class ComposeIn(_Strict):
    """``POST /v1/accounting/compose``."""

    mechanisms: Annotated[list[MechanismIn], Field(min_length=1, max_length=10_000)]
    delta: Delta
    accounting: Literal["rdp", "zcdp", "pld"] = "rdp"


class KeyIn(_Strict):
    """``POST /v1/keys``."""

    role: Literal["admin", "pipeline", "viewer"]
    datasets: (
        Annotated[list[Annotated[SafeText, Field(max_length=64)]], Field(max_length=1000)] | None
    ) = None
    label: Annotated[SafeText, Field(max_length=MAX_LABEL)] | None = None


__all__ = [
    "MIN_SAMPLE_RATE",
    "BudgetIn",
    "ChargeIn",
    "ComposeIn",
    "DatasetIn",
    "DatasetPatch",
    "KeyIn",
    "MechanismIn",
    "ReservationIn",
    "SampleRate",
    "at_least",
]
