"""What a mechanism kind declares: its parameters (``Param``), its value object (``Mechanism``) and
its registry entry (``KindSpec``). One module per kind in this package fills them in.

A parameter is declared once, as a dataclass field made by ``param(...)``: name, type, range,
unit, default and one-line help live there, and validation, the API schema, CLI flags and the
calibration ranges are all derived from it. Plain dataclasses: the core imports no Pydantic; the
API layer builds its models from ``KindSpec.params``.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import operator
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, ClassVar, Literal, Self

import numpy as np

from app.accounting.curve import PrivacyCurve, Vector
from app.accounting.orders import ORDERS

# Ranges: wide enough for any real use, narrow enough that no formula over- or underflows
# (a curve that rounds to 0 or inf would be a silent clamp).
MAX_COUNT = 1_000_000_000
MIN_SCALE, MAX_SCALE = 1e-6, 1e12  # sigma, Laplace scale, sensitivity
MIN_EPSILON, MAX_EPSILON = 1e-9, 100.0  # pure-DP epsilon of one invocation
MAX_K = 1_000_000_000
MIN_RATIO, MAX_RATIO = 1e-12, 1e6  # sensitivity / sigma for the Gaussian

ParamType = Literal["float", "int", "float_list"]
Direction = Literal["min", "max"]


class _Required:
    """Marks a parameter without default (it must be given)."""

    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()


@dataclass(frozen=True)
class Param:
    """One parameter of a mechanism kind, as the API, the CLI and validation see it.

    ``minimum`` / ``maximum`` bound every value (each element of a list), inclusive unless
    ``exclusive_minimum`` / ``exclusive_maximum``; ``default`` is ``REQUIRED`` when the field
    must be given; ``required`` is False for fields that belong to one of a kind's alternative
    forms (``KindSpec.one_of``).
    """

    name: str
    type: ParamType
    help: str
    unit: str = ""
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: bool = False
    exclusive_maximum: bool = False
    default: Any = REQUIRED
    required: bool = True
    max_items: int | None = None
    cli_help: str = ""
    omit_default: bool = False
    """Written by ``to_dict`` only when not at its default: for fields added to a kind after
    entries were first stored, so that readers of the earlier form still parse new entries."""

    @property
    def flag(self) -> str:
        """The CLI flag: ``--sample-rate`` for ``sample_rate``."""
        return "--" + self.name.replace("_", "-")

    def check(self, value: object) -> Any:
        """``value`` validated and normalised (float, int or tuple of floats), else ValueError
        naming the parameter and the bad value."""
        if self.type == "float_list":
            if isinstance(value, str | bytes) or not isinstance(value, Sequence):
                raise ValueError(f"{self.name} must be a list of numbers, got {value!r}")
            if not value:
                raise ValueError(f"{self.name} must not be empty")
            if self.max_items is not None and len(value) > self.max_items:
                raise ValueError(f"{self.name} has {len(value)} items, at most {self.max_items}")
            return tuple(self._number(f"{self.name}[{i}]", v) for i, v in enumerate(value))
        if self.type == "int":
            return self._integer(value)
        return self._number(self.name, value)

    def _range(self) -> str:
        lo = "(" if self.exclusive_minimum else "["
        hi = ")" if self.exclusive_maximum else "]"
        return f"{lo}{self.minimum:g}, {self.maximum:g}{hi}"

    def _number(self, name: str, value: object) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"{name} must be a number, got {value!r}")
        v = float(value)
        if not math.isfinite(v):
            raise ValueError(f"{name} must be finite, got {value!r}")
        if self.minimum is not None and self.exclusive_minimum and v <= self.minimum:
            raise ValueError(f"{name} must be > {self.minimum:g}, got {value!r}")
        if self.maximum is not None and self.exclusive_maximum and v >= self.maximum:
            raise ValueError(f"{name} must be < {self.maximum:g}, got {value!r}")
        if (self.minimum is not None and v < self.minimum) or (
            self.maximum is not None and v > self.maximum
        ):
            raise ValueError(f"{name} must be in {self._range()}, got {value!r}")
        return v

    def _integer(self, value: object) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            else:
                raise ValueError(f"{self.name} must be an integer, got {value!r}")
        assert isinstance(value, int)
        if (self.minimum is not None and value < self.minimum) or (
            self.maximum is not None and value > self.maximum
        ):
            raise ValueError(
                f"{self.name} must be an integer in [{self.minimum:g}, {self.maximum:g}], "
                f"got {value!r}"
            )
        return value


def param(
    *,
    help: str,
    unit: str = "",
    minimum: float | None = None,
    maximum: float | None = None,
    exclusive_minimum: bool = False,
    exclusive_maximum: bool = False,
    default: Any = REQUIRED,
    required: bool = True,
    max_items: int | None = None,
    cli_help: str = "",
    kw_only: bool = False,
    omit_default: bool = False,
) -> Any:
    """A mechanism field with its ``Param`` (name and type are taken from the dataclass)."""
    spec = {
        "help": help,
        "unit": unit,
        "minimum": minimum,
        "maximum": maximum,
        "exclusive_minimum": exclusive_minimum,
        "exclusive_maximum": exclusive_maximum,
        "required": required and default is REQUIRED,
        "max_items": max_items,
        "cli_help": cli_help or help,
        "omit_default": omit_default,
    }
    if default is REQUIRED:
        return field(metadata={"param": spec}, kw_only=kw_only)
    return field(default=default, metadata={"param": spec}, kw_only=kw_only)


_KEY_GETTERS: dict[type[Mechanism], Callable[[Mechanism], tuple[Any, ...]]] = {}


def _key_getter(cls: type[Mechanism]) -> Callable[[Mechanism], tuple[Any, ...]]:
    """A fast getter of (every parameter but count) as a tuple (``Mechanism.unit_key``)."""
    getter = _KEY_GETTERS.get(cls)
    if getter is None:
        names = [p.name for p in params_of(cls) if p.name not in cls.repetition_params]
        get = operator.attrgetter(*names)
        getter = (lambda m: (get(m),)) if len(names) == 1 else get
        _KEY_GETTERS[cls] = getter
    return getter


_TYPES: dict[object, ParamType] = {float: "float", int: "int", tuple[float, ...]: "float_list"}


_PARAMS: dict[type[Mechanism], tuple[Param, ...]] = {}


class Units(list[Any]):
    """A list of unit mechanisms that also holds some of their parameters as columns, read
    once (``column`` answers from them): a 100,000-entry compose then reads each object's
    parameters once, not once to group them and again to compute their curves."""

    def __init__(self, units: Sequence[Any], columns: dict[str, Vector]) -> None:
        super().__init__(units)
        self.columns = columns

    @typing.overload
    def __getitem__(self, index: typing.SupportsIndex) -> Any: ...

    @typing.overload
    def __getitem__(self, index: slice) -> Units: ...

    def __getitem__(self, index: typing.SupportsIndex | slice) -> Any:
        """A slice keeps its columns (sliced alike), so that a chunk of units is not read again."""
        if isinstance(index, slice):
            kept = {name: values[index] for name, values in self.columns.items()}
            return Units(super().__getitem__(index), kept)
        return super().__getitem__(index)


def column(ms: Sequence[Any], name: str) -> Vector:
    """Attribute ``name`` of each of ``ms`` as float64: the values ``np.array`` of them gives,
    read in one C-level pass (no Python loop over the objects), or kept by ``Units``."""
    if isinstance(ms, Units) and name in ms.columns:
        return ms.columns[name]
    out: Vector = np.fromiter(map(operator.attrgetter(name), ms), dtype=np.float64, count=len(ms))
    return out


def params_of(cls: type[Mechanism]) -> tuple[Param, ...]:
    """The ``Param`` of every field of mechanism class ``cls`` (``count`` last)."""
    if cls in _PARAMS:
        return _PARAMS[cls]
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        meta = f.metadata.get("param")
        if meta is None:
            continue
        default = REQUIRED if f.default is dataclasses.MISSING else f.default
        out.append(Param(name=f.name, type=_TYPES[hints[f.name]], default=default, **meta))
    out.sort(key=lambda p: p.name == "count")
    _PARAMS[cls] = tuple(out)
    return _PARAMS[cls]


@dataclass(frozen=True)
class Affine:
    """Curves that are affine in the order, rdp_i(alpha) = intercept_i + slope_i alpha (the
    Gaussian, zCDP): a weighted sum of many needs two dot products, not a matrix."""

    slope: Vector
    intercept: Vector
    rho: Vector
    pure_eps: Vector
    delta: Vector
    gaussian_only: bool

    def curves(self) -> UnitCurves:
        n = self.slope.size
        return UnitCurves(
            rho=self.rho,
            rdp=self.intercept[:, None] + self.slope[:, None] * ORDERS,
            pure_eps=self.pure_eps,
            delta=self.delta,
            gaussian_only=np.full(n, self.gaussian_only, dtype=bool),
        )


@dataclass(frozen=True)
class UnitCurves:
    """The curves of n distinct unit mechanisms of one kind, as arrays (row i = mechanism i):
    ``rho``, ``pure_eps``, ``delta`` (n,), ``rdp`` (n, |ORDERS|), ``gaussian_only`` (n,)."""

    rho: Vector
    rdp: Vector
    pure_eps: Vector
    delta: Vector
    gaussian_only: np.ndarray[Any, np.dtype[np.bool_]]

    @classmethod
    def stack(cls, curves: Sequence[PrivacyCurve]) -> UnitCurves:
        return cls(
            rho=np.array([c.rho for c in curves], dtype=np.float64),
            rdp=np.array([c.rdp for c in curves], dtype=np.float64).reshape(
                len(curves), ORDERS.size
            ),
            pure_eps=np.array([c.pure_eps for c in curves], dtype=np.float64),
            delta=np.array([c.delta for c in curves], dtype=np.float64),
            gaussian_only=np.array([c.gaussian_only for c in curves], dtype=bool),
        )

    @classmethod
    def concatenate(cls, parts: Sequence[UnitCurves]) -> UnitCurves:
        """The rows of ``parts``, one after the other."""
        return cls(
            rho=np.concatenate([p.rho for p in parts]),
            rdp=np.concatenate([p.rdp for p in parts]),
            pure_eps=np.concatenate([p.pure_eps for p in parts]),
            delta=np.concatenate([p.delta for p in parts]),
            gaussian_only=np.concatenate([p.gaussian_only for p in parts]),
        )

    @classmethod
    def of(
        cls,
        rho: Vector,
        rdp: Vector,
        pure_eps: Vector | float,
        delta: Vector | float = 0.0,
        gaussian_only: bool = False,
    ) -> UnitCurves:
        """Arrays for n curves (scalars broadcast to all of them)."""
        n = rdp.shape[0]
        return cls(
            rho=np.asarray(rho, dtype=np.float64),
            rdp=rdp,
            pure_eps=np.broadcast_to(np.asarray(pure_eps, dtype=np.float64), (n,)).copy(),
            delta=np.broadcast_to(np.asarray(delta, dtype=np.float64), (n,)).copy(),
            gaussian_only=np.full(n, gaussian_only, dtype=bool),
        )

    def rows(self, sel: slice) -> UnitCurves:
        """The curves of rows ``sel`` (views)."""
        return UnitCurves(
            rho=self.rho[sel],
            rdp=self.rdp[sel],
            pure_eps=self.pure_eps[sel],
            delta=self.delta[sel],
            gaussian_only=self.gaussian_only[sel],
        )

    def row(self, i: int) -> PrivacyCurve:
        return PrivacyCurve(
            rho=float(self.rho[i]),
            rdp=self.rdp[i],
            pure_eps=float(self.pure_eps[i]),
            gaussian_only=bool(self.gaussian_only[i]),
            delta=float(self.delta[i]),
        )


RDP_EVAL_MARGIN = 2.0**-50
"""Relative margin (about 4 ulps) added to closed-form RDP values: they are evaluated to within
a few ulps, and the stored curve must never be below the true one."""


@dataclass(frozen=True, slots=True)
class Mechanism:
    """Base class: a mechanism invocation repeated ``count`` times.

    A kind subclasses it with its ``kind`` name, its fields (``param``), cross-field checks in
    ``validate`` and its curve in ``_unit_curve``. Instances are validated on construction and
    hashable (their unit curve is cached).
    """

    kind: ClassVar[str] = ""
    repetition_params: ClassVar[tuple[str, ...]] = ("count",)
    """The fields that only repeat the mechanism (not part of its unit curve's key)."""
    finite_curve: ClassVar[bool] = True
    """Whether every curve of this kind is finite (rho and every order); the rdp kind's is not
    above its largest given order."""

    count: int = param(
        default=1,
        minimum=1,
        maximum=MAX_COUNT,
        help="Repetitions of the mechanism (its curve is multiplied by count).",
        kw_only=True,
    )

    def __post_init__(self) -> None:
        for p in params_of(type(self)):
            object.__setattr__(self, p.name, p.check(getattr(self, p.name)))
        self.validate()

    def validate(self) -> None:
        """Cross-field rules (ValueError naming the values); single fields are checked already."""

    def repeated(self, n: int) -> Self:
        """This mechanism run ``n`` times as often (``count`` multiplied)."""
        return dataclasses.replace(self, count=self.count * n)

    def repetitions(self) -> int:
        """How many times the unit curve is composed (``count``; DP-SGD: ``steps * count``)."""
        return self.count

    def unit(self) -> Self:
        """The same mechanism with one repetition (the cache key for its curve)."""
        return self if self.count == 1 else self._with(count=1)

    def _with(self, **values: Any) -> Self:
        """A copy with some fields changed, without validating again (for values known valid,
        such as a repetition count of 1)."""
        new = copy.copy(self)
        for name, value in values.items():
            object.__setattr__(new, name, value)
        return new

    def curve(self) -> PrivacyCurve:
        """The composed curve of all repetitions."""
        n = self.repetitions()
        if n > MAX_COUNT:
            raise ValueError(f"{self.kind}: {n} repetitions in all, at most {MAX_COUNT}")
        return unit_curve(self.unit()).scaled(n)

    def _unit_curve(self) -> PrivacyCurve:
        """The curve of one repetition, before the rounding margin (a kind defines this or,
        for a vectorised formula, ``_raw_curves``)."""
        raise NotImplementedError

    @classmethod
    def _affine(cls, units: Sequence[Self]) -> Affine | None:
        """For kinds whose curve is affine in the order, its coefficients (else None)."""
        return None

    @classmethod
    def _raw_curves(cls, units: Sequence[Self]) -> UnitCurves:
        """The curves of one repetition of each of ``units``, before the rounding margin."""
        affine = cls._affine(units)
        if affine is not None:
            return affine.curves()
        return UnitCurves.stack([u._unit_curve() for u in units])

    @classmethod
    def unit_curves(cls, units: Sequence[Self]) -> UnitCurves:
        """The unit curves of many unit mechanisms of this kind at once, as ``unit_curve`` gives
        them one by one (both go through ``_raw_curves``, so they are the same numbers)."""
        raw = cls._raw_curves(units)
        if cls.finite_curve:
            bad = ~(np.isfinite(raw.rdp).all(axis=1) & np.isfinite(raw.rho))
            if bad.any():
                raise ValueError(f"{cls.kind}: the privacy loss of these parameters overflows")
        return dataclasses.replace(raw, rdp=raw.rdp * (1.0 + RDP_EVAL_MARGIN))

    @classmethod
    def unit_spreads(cls, units: Sequence[Self]) -> Vector | None:
        """How far each of ``units``' unit RDP values (rows, as ``unit_curves``) may differ when
        computed on another CPU, beyond the last bits (``verify`` allows it on top of its
        relative 1e-12); None: nowhere (every kind but those that sum terms near 1 to get a
        tiny value)."""
        return None

    def unit_key(self) -> tuple[Any, ...]:
        """What identifies this mechanism's unit curve (its parameters but the repetitions)."""
        key: tuple[Any, ...] = _key_getter(type(self))(self)
        return key

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready description: ``{"mechanism": kind, **parameters, "count": n}``."""
        data = {
            p.name: list(v) if isinstance(v := getattr(self, p.name), tuple) else v
            for p in params_of(type(self))
            if not (p.omit_default and getattr(self, p.name) == p.default)
        }
        return {"mechanism": self.kind, **data}

    @classmethod
    def from_fields(cls, fields: dict[str, Any]) -> Mechanism:
        """Build from the fields of a JSON description (``mechanism`` removed); kinds with an
        alternative form (Laplace by ``scale``) override this."""
        known = {p.name for p in params_of(cls)}
        unknown = sorted(set(fields) - known)
        if unknown:
            raise ValueError(f"{cls.kind}: unexpected fields {unknown}; known: {sorted(known)}")
        missing = sorted(p.name for p in params_of(cls) if p.required and p.name not in fields)
        if missing:
            raise ValueError(f"{cls.kind}: missing fields {missing}")
        return cls(**fields)


def finish(curve: PrivacyCurve, mechanism: Mechanism, *, partial: bool = False) -> PrivacyCurve:
    """A unit curve as stored: finite unless the kind says otherwise (or ``partial``: evaluated
    at some orders only), its RDP values raised by ``RDP_EVAL_MARGIN`` so that values evaluated
    to a few ulps stay upper bounds."""
    if mechanism.finite_curve and not partial and not curve.is_finite():
        raise ValueError(f"{mechanism.kind}: the privacy loss of these parameters overflows")
    return dataclasses.replace(curve, rdp=curve.rdp * (1.0 + RDP_EVAL_MARGIN))


@lru_cache(maxsize=4096)
def unit_curve(mechanism: Mechanism) -> PrivacyCurve:
    """The curve of one repetition of ``mechanism`` (cached per parameter set)."""
    return type(mechanism).unit_curves([mechanism]).row(0)


DpEventTranslator = Callable[[Mapping[str, Any], "Translate"], list[Mechanism]]
"""Turns one dp_accounting event (a JSON dict, ``type`` = its class name) into mechanisms; gets
the generic translator for nested events."""

Translate = Callable[[Mapping[str, Any]], list[Mechanism]]

DpEventCheck = Callable[[Mapping[str, Any], str, int], Any]
"""Checks one dp_accounting event of a kind's before anything is translated: gets the event, its
path in the tree (``events[2].event``, ``""`` at the root) and its depth; raises
``kinds._events.DpEventError`` naming the event, its own field and value and the path; returns
the event to translate (itself, or one rewritten by the kind's rule)."""


def json_float(value: int | float) -> float:
    """A JSON number as a float. JSON (and Python's parser) allows integers of any size: one
    beyond the float range is an infinity of its sign (``float()`` raised OverflowError, a 500
    from a DpEvent charge), which every check refuses as not finite."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def event_number(event: Mapping[str, Any], name: str) -> float:
    """A numeric field of a DpEvent dict (ValueError naming the event type and the field)."""
    value = event.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{event.get('type')}: field {name!r} must be a number, got {value!r}")
    return json_float(value)


def unknown_event_fields(kind: object, names: Iterable[str]) -> ValueError:
    """The error for DpEvent fields no translation reads: nothing is charged for such an
    event (a ``GaussianDpEvent`` with a ``sensitivity`` of 10 was charged at sensitivity 1)."""
    return ValueError(
        f"{kind}: unknown field(s) {', '.join(repr(n) for n in names)}: nothing is charged for an "
        "event with fields this ledger does not read (a sensitivity or delta left out would "
        "under-state its loss)"
    )


def check_event_fields(event: Mapping[str, Any], allowed: Iterable[str]) -> None:
    """``unknown_event_fields`` raised for the fields of ``event`` other than ``type`` and
    ``allowed``."""
    known = {"type", *allowed}
    if extra := sorted(str(k) for k in event if k not in known):
        raise unknown_event_fields(event.get("type"), extra)


@dataclass(frozen=True)
class NextQuery:
    """How the dashboard asks what the next invocation of a kind can be (GET /calibrate):
    ``fixed``, the query's other parameters (``parameter`` among them when it is not the
    kind's first calibration parameter), and ``words``, them in plain words ("sensitivity 1")."""

    fixed: Mapping[str, float | int | str] = field(default_factory=dict)
    words: str = ""


@dataclass(frozen=True)
class Examples:
    """Parameters of a kind that the tests shared by every kind run with (they read them through
    the registry, so a new kind is in those tests by declaring these: no test table to edit).

    Each is a wire description without its ``"mechanism"``. ``valid``: representative valid
    descriptions, the first the kind's typical one (round trips, repetition, range checks), the
    others further values and forms (each is also charged through the CLI's flags);
    ``edges``: valid descriptions at the extremes of its ranges (conversions at the least delta);
    ``calibration``: for each calibration parameter, the other parameters a caller gives, extremes
    included (each must answer on an empty ledger); a parameter left out is asked with none.
    """

    valid: tuple[Mapping[str, Any], ...]
    edges: tuple[Mapping[str, Any], ...] = ()
    calibration: Mapping[str, tuple[Mapping[str, Any], ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.valid:
            raise TypeError("Examples needs at least one valid description")


_Examples = Examples


@dataclass(frozen=True)
class KindSpec:
    """A mechanism kind in the registry.

    ``description``: one line for people (dashboard, CLI help); ``neighbours``: the
    neighbouring relation and parameter convention; ``calibration``: parameter -> ``"min"``
    (least value that fits: noise) or ``"max"`` (largest: epsilon, steps); ``dp_events``:
    dp_accounting event type -> translator; ``dp_event_checks``: event type (one of
    ``dp_events``) -> its ``DpEventCheck``, run over the whole event tree before any part is
    translated (``dp_events.prepared``); ``one_of``: alternative groups of fields of which
    exactly one is given (Laplace: epsilon, or scale + sensitivity); ``extra_params``: fields of
    an alternative form that the value object does not store.

    ``steep_curve``: its RDP curve may grow much faster than linearly in the order (DP-SGD's, a
    curve given at a few orders): an adaptive rdp dataset that may admit it fixes a lower order
    (``adaptive.choose_order``). ``pure_calibration``: the parameter calibration solves for is
    its (epsilon, delta)-DP epsilon, or a scale that is sensitivity / epsilon: calibrate's PLD
    search then first tries that epsilon plus the room the PLD leaves (``services.calibrate``).

    ``title``: its short name for people (dashboard rows; default: the wire name in words);
    ``next_query``: the calibration the dashboard shows for it (None: not offered there, e.g. a
    kind whose delta is the pipeline's own).

    ``examples``: parameters the tests shared by every kind run with (``Examples``); a kind
    without them fails those tests, naming it.

    ``pld`` (required, so that every kind decides it): the name of the function in
    ``app.accounting.pld_mechanisms`` that builds this kind's privacy loss distribution from its
    wire fields and ``interval`` (named, not imported: that module imports the registry, and
    checks every name at import), or None when the kind has none; then ``no_pld`` says why, as
    the rest of the sentence "a '<kind>' entry ..." that refuses it on a pld dataset.
    """

    Examples: ClassVar[type[_Examples]] = _Examples
    """So that a kind module writes ``examples=KindSpec.Examples(...)``, no further import."""

    mechanism: type[Mechanism]
    description: str
    neighbours: str
    pld: str | None
    no_pld: str = ""
    calibration: Mapping[str, Direction] = field(default_factory=dict)
    dp_events: Mapping[str, DpEventTranslator] = field(default_factory=dict)
    dp_event_checks: Mapping[str, DpEventCheck] = field(default_factory=dict)
    one_of: tuple[tuple[str, ...], ...] = ()
    extra_params: tuple[Param, ...] = ()
    steep_curve: bool = False
    pure_calibration: bool = False
    title: str = ""
    next_query: NextQuery | None = NextQuery()
    examples: _Examples | None = None

    def __post_init__(self) -> None:
        if not self.title:
            object.__setattr__(self, "title", self.name.replace("_", " ").capitalize())
        if stray := sorted(set(self.dp_event_checks) - set(self.dp_events)):
            raise TypeError(
                f"kind {self.name!r} checks {', '.join(stray)} but does not translate it: a "
                "check belongs with its translator"
            )
        if (self.pld is None) == bool(self.no_pld):
            return
        if self.pld is None:
            raise TypeError(f"kind {self.name!r} has no PLD builder: say why in no_pld")
        raise TypeError(f"kind {self.name!r} names PLD builder {self.pld!r} and a no_pld reason")

    @property
    def name(self) -> str:
        return self.mechanism.kind

    @property
    def accountings(self) -> tuple[str, ...]:
        """The dataset accountings that can admit this kind: every one admits by RDP; zcdp
        needs a finite rho (``Mechanism.finite_curve``); pld needs a privacy loss distribution
        (``pld``)."""
        return (
            "rdp",
            *(("zcdp",) if self.mechanism.finite_curve else ()),
            *(("pld",) if self.pld is not None else ()),
        )

    @property
    def params(self) -> tuple[Param, ...]:
        """Every field the wire form accepts, ``count`` last."""
        alternative = {n for group in self.one_of for n in group}
        own = tuple(
            dataclasses.replace(p, required=False) if p.name in alternative else p
            for p in params_of(self.mechanism)
        )
        return own[:-1] + self.extra_params + own[-1:]

    def param(self, name: str) -> Param:
        for p in self.params:
            if p.name == name:
                return p
        raise ValueError(f"{self.name} has no parameter {name!r}")


__all__ = [
    "check_event_fields",
    "column",
    "MAX_COUNT",
    "MAX_EPSILON",
    "MAX_K",
    "MAX_RATIO",
    "MAX_SCALE",
    "MIN_EPSILON",
    "MIN_RATIO",
    "MIN_SCALE",
    "RDP_EVAL_MARGIN",
    "REQUIRED",
    "Direction",
    "Affine",
    "DpEventCheck",
    "Examples",
    "DpEventTranslator",
    "KindSpec",
    "Mechanism",
    "NextQuery",
    "Param",
    "Translate",
    "UnitCurves",
    "event_number",
    "json_float",
    "unknown_event_fields",
    "finish",
    "param",
    "params_of",
    "unit_curve",
]
