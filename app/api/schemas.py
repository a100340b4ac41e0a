"""Request schemas (Pydantic v2). Responses are plain dicts built by the services.

Numbers must be finite JSON numbers of the right type (strict mode: no strings, no booleans);
unknown fields are refused. Mechanism objects have one model per kind of the registry
(``app.accounting.registry``), generated from the kind's ``Param`` declarations, so the OpenAPI
document shows each kind's fields with their ranges, units and help; the accounting core's
constructors check them again along with the cross-field rules, and a violation becomes a 422
naming the bad value.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, Union

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationInfo,
    create_model,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from app.accounting import registry
from app.accounting.filters import MAX_BUDGET_EPSILON, MIN_BUDGET_DELTA
from app.accounting.kinds._spec import REQUIRED, Param
from app.accounting.mechanisms import Mechanism, mechanism_from_dict
from app.api.dataset_names import DatasetName, NewAllocationName
from app.api.safe_text import SafeText, check_json_tree

FiniteFloat = Annotated[float, Field(allow_inf_nan=False)]
MIN_NORMAL_FLOAT = 2.0**-1022
MIN_SAMPLE_RATE = MIN_NORMAL_FLOAT
"""Smallest sample rate accepted (the smallest normal float): below it 1/q overflows and one
subsampled-Gaussian curve took 13 s of CPU instead of 0.3 s. Every parameter whose range is
open at 0 has this floor."""


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


def at_least_or_none(minimum: float, why: str) -> Callable[[float | None], float | None]:
    """``at_least`` for an optional value (a query parameter that may be absent)."""
    check = at_least(minimum, why)

    def check_optional(value: float | None) -> float | None:
        return None if value is None else check(value)

    return check_optional


DELTA_FLOOR_WHY = "the smallest delta whose conversions stay finite and sound"


def zero_or_at_least(minimum: float, why: str) -> Callable[[float | None], float | None]:
    """``at_least_or_none`` that also takes 0 (a delta of 0 asks for the pure-DP sum)."""
    check = at_least_or_none(minimum, why)

    def check_zero(value: float | None) -> float | None:
        return value if value == 0.0 else check(value)

    return check_zero


QueryDelta = Annotated[
    float,
    Field(
        ge=0,
        lt=1,
        allow_inf_nan=False,
        description=(
            "0 (the pure-DP sum, for mechanisms that all have one), or at least the smallest "
            "budget delta (2^-1022)"
        ),
    ),
    AfterValidator(zero_or_at_least(MIN_BUDGET_DELTA, DELTA_FLOOR_WHY)),
]
"""A delta to convert at (not a budget): 0 asks for the pure-DP sum."""


SampleRate = Annotated[
    float,
    Field(gt=0, le=1, allow_inf_nan=False, json_schema_extra={"minimum": MIN_SAMPLE_RATE}),
    AfterValidator(at_least(MIN_SAMPLE_RATE, "the smallest normal float")),
]

MAX_METADATA_BYTES = 16_384
MAX_METADATA_DEPTH = 8
MAX_LABEL = 200


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


# --- mechanism objects, one model per kind of the registry -----------------------------------


class _MechanismBase(_Strict):
    """A mechanism object: its kind's fields (generated from the registry by ``_kind_model``),
    validated by the accounting core as well (cross-field rules answer 422 the same way)."""

    _kind: ClassVar[str] = ""
    _one_of: ClassVar[tuple[tuple[str, ...], ...]] = ()
    _omit_default: ClassVar[dict[str, Any]] = {}
    _core: Mechanism | None = PrivateAttr(default=None)

    @model_validator(mode="before")
    @classmethod
    def _one_form(cls, data: Any) -> Any:
        """Kinds with alternative forms (Laplace: epsilon, or scale + sensitivity): exactly one
        form, led by its first field, and no field of another form."""
        if not cls._one_of or not isinstance(data, dict):
            return data
        given = {k for k, v in data.items() if v is not None}
        used = [g for g in cls._one_of if given & set(g)]
        forms = " or ".join(
            f"'{g[0]}'" + (f" (+ {', '.join(repr(n) for n in g[1:])})" if g[1:] else "")
            for g in cls._one_of
        )
        leaders = [g for g in used if g[0] in given]
        if len(leaders) != 1:
            raise ValueError(f"{cls._kind} takes exactly one of {forms}")
        stray = sorted(n for g in used if g is not leaders[0] for n in g if n in given)
        if stray:
            raise ValueError(
                f"{cls._kind}: {', '.join(repr(n) for n in stray)} does not go with "
                f"'{leaders[0][0]}' (the forms are {forms})"
            )
        return data

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
        """The mechanism as given (defaults filled in, except fields added to a kind later
        while at their default), for the ledger and answers."""
        data = self.model_dump(exclude_none=True)
        for name, default in self._omit_default.items():
            if data.get(name) == default:
                del data[name]
        return data


def _describe(p: Param) -> str:
    return f"{p.help} Unit: {p.unit}." if p.unit else p.help


def _annotation(p: Param) -> Any:
    """The Pydantic type of one parameter: its range, help and unit in ``Field`` (so the
    OpenAPI document shows them), integers strict, floats finite, lists bounded per element."""
    bounds: dict[str, Any] = {}
    if p.minimum is not None:
        bounds["gt" if p.exclusive_minimum else "ge"] = p.minimum
    if p.maximum is not None:
        bounds["lt" if p.exclusive_maximum else "le"] = p.maximum
    extra: dict[str, Any] = {"x-unit": p.unit} if p.unit else {}
    floor: list[Any] = []
    if p.type != "int" and p.minimum == 0 and p.exclusive_minimum:
        # a subnormal value of a parameter open at 0 overflows its inverse (1 / q)
        extra["minimum"] = MIN_NORMAL_FLOAT
        floor = [AfterValidator(at_least(MIN_NORMAL_FLOAT, "the smallest normal float"))]
    about: dict[str, Any] = {"description": _describe(p)}
    if extra:
        about["json_schema_extra"] = extra
    if p.type == "int":
        return Annotated[int, Field(**bounds, **about)]
    if p.type == "float_list":
        item = Annotated[float, Field(allow_inf_nan=False, **bounds), *floor]
        return Annotated[
            list[item],
            Field(min_length=1, max_length=p.max_items, **about),
        ]
    return Annotated[float, Field(allow_inf_nan=False, **bounds, **about), *floor]


def _kind_model(kind: str) -> type[_MechanismBase]:
    """The request model of one kind, from its ``KindSpec``: discriminator ``mechanism``, one
    field per ``Param`` (help, unit and range in the schema), unknown fields refused."""
    s = registry.spec(kind)
    fields: dict[str, Any] = {
        "mechanism": (Literal[kind], Field(description="The mechanism kind.")),
    }
    omit: dict[str, Any] = {}
    for p in s.params:
        annotation = _annotation(p)
        if p.default is REQUIRED and p.required:
            fields[p.name] = (annotation, ...)
        else:
            default = None if p.default is REQUIRED else p.default
            fields[p.name] = (annotation | None if default is None else annotation, default)
        if p.omit_default:
            omit[p.name] = p.default
    name = "".join(part.capitalize() for part in kind.split("_")) + "In"
    model = create_model(
        name,
        __base__=_MechanismBase,
        __doc__=f"{s.description} Neighbours: {s.neighbours}",
        __module__=__name__,
        **fields,
    )
    model._kind = kind
    model._one_of = s.one_of
    model._omit_default = omit
    return model


MECHANISM_MODELS: dict[str, type[_MechanismBase]] = {
    kind: _kind_model(kind) for kind in registry.kind_names()
}
"""The request model of every kind of the registry, by its wire name."""

if TYPE_CHECKING:
    MechanismIn = _MechanismBase
    Kind = str
else:
    MechanismIn = Annotated[
        Union[tuple(MECHANISM_MODELS.values())],  # noqa: UP007 (a union built at run time)
        Field(discriminator="mechanism"),
    ]
    Kind = Literal[tuple(registry.kind_names())]


def _depth(value: Any) -> int:
    """How many objects and arrays deep ``value`` nests (0 for a scalar). Iterative: a body the
    JSON parser takes nests up to about 990 levels, and a recursive walk of two frames per
    level ran out of stack from about 478 on (a 500, found by an outside audit); the walk
    visits each node once, so its work is bounded by the body size."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, dict):
            children: Iterable[Any] = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        deepest = max(deepest, level)
        stack.extend((child, level + 1) for child in children)
    return deepest


def _check_depth(value: Any, field: str, limit: int) -> None:
    """A 422 naming the depth when ``value`` nests deeper than ``limit``; checked before any
    recursive walk of it (``check_json_tree``, ``json.dumps``)."""
    depth = _depth(value)
    if depth > limit:
        raise ValueError(f"{field} nests {depth} levels deep; the limit is {limit}")


def check_metadata(value: dict[str, Any] | None) -> dict[str, Any] | None:
    """The size limit of a metadata object (its depth was checked before it was validated,
    ``_WithLabel._no_nan``)."""
    if value is None:
        return None
    size = len(json.dumps(value, allow_nan=False, default=str))
    if size > MAX_METADATA_BYTES:
        raise ValueError(f"metadata is {size} bytes of JSON; the limit is {MAX_METADATA_BYTES}")
    return value


class _WithLabel(_Strict):
    label: Annotated[SafeText, Field(max_length=MAX_LABEL)] | None = None
    metadata: dict[str, Any] | None = None

    @field_validator("metadata", mode="before")
    @classmethod
    def _no_nan(cls, v: Any) -> Any:
        if v is not None:
            _check_depth(v, "metadata", MAX_METADATA_DEPTH)
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


class BlocksIn(_Strict):
    """An inclusive range of block keys (``2026-11-23``, ``2026-W48``, ``2026-11``; UTC)."""

    from_: Annotated[str, Field(alias="from", min_length=1, max_length=16)]
    to: Annotated[str, Field(min_length=1, max_length=16)]

    def span(self) -> tuple[str, str]:
        return (self.from_, self.to)


AllocationName = DatasetName


class _Structures(_Strict):
    """Budget structures a charge or reservation is made to (issue 15)."""

    allocation: AllocationName | None = None
    blocks: BlocksIn | None = None


class ChargeIn(_WithLabel, _Structures):
    """``POST /v1/datasets/{id}/charges``."""

    mechanism: MechanismIn


MAX_DP_EVENT_DEPTH = 32


class DpEventChargeIn(_WithLabel):
    """``POST /v1/datasets/{id}/charges/dp_event``: a dp_accounting ``DpEvent`` as JSON
    (``{"type": "<class name>", **its fields}``, nested events as objects; the client's
    ``dp_event_to_dict`` writes it), charged as the mechanisms it translates to."""

    dp_event: dict[str, Any] = Field(
        description="A dp_accounting DpEvent as JSON; GET /v1/mechanisms lists the types."
    )

    @field_validator("dp_event", mode="before")
    @classmethod
    def _safe(cls, v: Any) -> Any:
        _check_depth(v, "dp_event", MAX_DP_EVENT_DEPTH)
        check_json_tree(v, "dp_event")
        return v


class ReservationIn(_WithLabel, _Structures):
    """``POST /v1/datasets/{id}/reservations``."""

    mechanism: MechanismIn
    ttl_seconds: Annotated[int, Field(ge=1)] = 600


Delta = Annotated[
    float,
    Field(gt=0, lt=1, allow_inf_nan=False, json_schema_extra={"minimum": MIN_BUDGET_DELTA}),
    AfterValidator(at_least(MIN_BUDGET_DELTA, DELTA_FLOOR_WHY)),
]


class BudgetIn(_Strict):
    epsilon: Annotated[float, Field(gt=0, le=MAX_BUDGET_EPSILON, allow_inf_nan=False)]
    delta: Delta


LEFT_OUT: Any = None
"""The default of a PATCH member that cannot be null (see ``_Patch``)."""


def _refuse_null(value: Any, info: ValidationInfo) -> Any:
    """A PATCH member given as ``null`` where null is no value of the field: 422, naming it
    (it was read as "no change": a client that serialised a missing value as null got a 200
    that changed nothing)."""
    if value is None:
        raise PydanticCustomError(
            "null_not_allowed",
            "{field} cannot be null: leave it out to keep its value",
            {"field": info.field_name},
        )
    return value


def _no_null_defaults(schema: dict[str, Any], model: type[Any]) -> None:
    """The OpenAPI document shows no ``"default": null`` for a member that cannot be null."""
    for name in model._NOT_NULL:
        schema["properties"][name].pop("default", None)


class _Patch(_Strict):
    """A PATCH body: a member left out keeps its value. The members named in ``_NOT_NULL`` are
    typed without ``None`` and default to ``None`` only when left out (that default is never
    validated): an explicit ``null`` is a 422 naming the member (each subclass applies
    ``_refuse_null`` to them), and the OpenAPI document shows neither null nor a default for
    them. Read a PATCH body with ``model_dump(exclude_unset=True)`` (the members given), never
    by attribute."""

    model_config = ConfigDict(json_schema_extra=_no_null_defaults)
    _NOT_NULL: ClassVar[tuple[str, ...]] = ()


class BudgetPatch(_Patch):
    """A budget change: epsilon, delta or both (a member left out keeps its value)."""

    _NOT_NULL = ("epsilon", "delta")
    epsilon: Annotated[float, Field(gt=0, le=MAX_BUDGET_EPSILON, allow_inf_nan=False)] = LEFT_OUT
    delta: Delta = LEFT_OUT

    _not_null = field_validator(*_NOT_NULL, mode="before")(_refuse_null)

    @model_validator(mode="after")
    def _something(self) -> BudgetPatch:
        if not self.model_fields_set:
            raise PydanticCustomError(
                "empty_budget", "give epsilon, delta or both (an empty budget changes nothing)"
            )
        return self


Name = DatasetName
Description = Annotated[SafeText, Field(max_length=2000)]


class PartitionIn(_Strict):
    """Time partition of a dataset: its budget applies to each block (UTC)."""

    unit: Literal["day", "week", "month"]


EntryDeltaBudget = Annotated[
    float,
    Field(
        ge=0,
        lt=1,
        allow_inf_nan=False,
        description="adaptive datasets: the part of the budget delta set aside, fixed at "
        "creation, for mechanisms with their own delta (approx_dp; zcdp or rdp with delta). They "
        "are admitted while their deltas add up to at most this, and the filter converts at the "
        "budget delta less it. 0 (default): such mechanisms are refused (422). Must be below the "
        "budget delta; non-adaptive datasets admit them up to the budget delta without it. On a "
        "partitioned dataset it is per block (with a lifetime budget, give "
        "lifetime_entry_delta_budget too)",
    ),
]

LifetimeEntryDeltaBudget = Annotated[
    float,
    Field(
        ge=0,
        lt=1,
        allow_inf_nan=False,
        description="partitioned adaptive datasets with a lifetime budget and an "
        "entry_delta_budget: the part of the lifetime budget's delta set aside, fixed at "
        "creation, for mechanisms with their own delta, whose deltas add up over all blocks "
        "there. Required with both (0, the default, otherwise); must be below the lifetime "
        "budget's delta",
    ),
]


class DatasetIn(_Strict):
    """``POST /v1/datasets``."""

    name: Name
    budget: BudgetIn
    accounting: Literal["rdp", "zcdp", "pld"] = "rdp"
    adaptive: bool = True
    allowed_mechanisms: Annotated[list[Kind], Field(min_length=1, max_length=16)] | None = None
    description: Description | None = None
    partition: PartitionIn | None = None
    lifetime_budget: BudgetIn | None = None
    entry_delta_budget: EntryDeltaBudget = 0.0
    lifetime_entry_delta_budget: LifetimeEntryDeltaBudget = 0.0


class AllocationIn(_Strict):
    """``POST /v1/datasets/{id}/allocations``."""

    name: NewAllocationName
    budget: BudgetIn
    entry_delta_budget: EntryDeltaBudget = 0.0


def _refuse_null_budget(value: Any) -> Any:
    """``_refuse_null`` for a budget that is the whole change (an allocation's PATCH): it is
    required, so "leave it out" would be no advice."""
    if value is None:
        raise PydanticCustomError(
            "null_not_allowed", "budget cannot be null: give epsilon, delta or both"
        )
    return value


class AllocationPatch(_Patch):
    """``PATCH /v1/datasets/{id}/allocations/{name}``: its budget (required)."""

    _NOT_NULL = ("budget",)
    budget: BudgetPatch

    _not_null = field_validator(*_NOT_NULL, mode="before")(_refuse_null_budget)


class DatasetPatch(_Patch):
    """``PATCH /v1/datasets/{id}``: budget and description (rules only before the first charge).

    A member left out keeps its value. ``description`` and ``allowed_mechanisms`` may be set to
    ``null`` (no description; every kind allowed); every other member is 422 when ``null``."""

    _NOT_NULL = (
        "name",
        "budget",
        "lifetime_budget",
        "accounting",
        "adaptive",
        "warning_threshold",
        "entry_delta_budget",
        "lifetime_entry_delta_budget",
    )
    name: Name = LEFT_OUT
    budget: BudgetPatch = LEFT_OUT
    lifetime_budget: BudgetPatch = Field(
        default=LEFT_OUT,
        description="partitioned datasets: set or change the lifetime budget (the cap on the "
        "composition of all charges); setting one where there was none needs epsilon and delta",
    )
    description: Description | None = None
    accounting: Literal["rdp", "zcdp", "pld"] = LEFT_OUT
    adaptive: bool = LEFT_OUT
    entry_delta_budget: EntryDeltaBudget = LEFT_OUT
    lifetime_entry_delta_budget: LifetimeEntryDeltaBudget = LEFT_OUT
    allowed_mechanisms: Annotated[list[Kind], Field(min_length=1, max_length=16)] | None = None
    warning_threshold: Annotated[
        float,
        Field(
            gt=0,
            le=1,
            allow_inf_nan=False,
            description="fraction of the budget epsilon at which the state turns warning",
        ),
    ] = LEFT_OUT

    _not_null = field_validator(*_NOT_NULL, mode="before")(_refuse_null)


class ComposeIn(_Strict):
    """``POST /v1/accounting/compose``."""

    mechanisms: Annotated[list[MechanismIn], Field(min_length=1, max_length=10_000)]
    delta: QueryDelta
    accounting: Literal["rdp", "zcdp", "pld"] = "rdp"


class KeyIn(_Strict):
    """``POST /v1/keys``."""

    role: Literal["admin", "pipeline", "viewer"]
    datasets: (
        Annotated[
            list[Annotated[SafeText, Field(max_length=64)]], Field(min_length=1, max_length=1000)
        ]
        | None
    ) = Field(
        None,
        description="the datasets (ids or names) the key reaches; null or absent: every dataset",
    )
    label: Annotated[SafeText, Field(max_length=MAX_LABEL)] | None = None
    allocations: Annotated[list[AllocationName], Field(min_length=1, max_length=1000)] | None = None

    @field_validator("datasets", mode="before")
    @classmethod
    def _datasets_not_empty(cls, value: Any) -> Any:
        # before the list's own min_length: this reason rather than "at least 1 item"
        if isinstance(value, list) and not value:
            raise ValueError(
                "an empty list reaches no dataset: name at least one, or leave 'datasets' out "
                "(or null) for every dataset"
            )
        return value


__all__ = [
    "AllocationIn",
    "AllocationPatch",
    "BlocksIn",
    "PartitionIn",
    "MIN_SAMPLE_RATE",
    "BudgetIn",
    "ChargeIn",
    "ComposeIn",
    "DatasetIn",
    "DatasetPatch",
    "DpEventChargeIn",
    "MECHANISM_MODELS",
    "KeyIn",
    "Kind",
    "MechanismIn",
    "ReservationIn",
    "SampleRate",
    "at_least",
]
