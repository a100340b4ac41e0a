"""``GET /v1/datasets/{id}/calibrate``'s query, derived from the registry of kinds.

``mechanism`` names a kind that has a parameter to calibrate, and every field of such a kind
(but a list: a fixed ``orders`` means nothing in a query) is a query parameter fixing it, of the
name the field has. A new kind's fields are query parameters without editing the route, each
documented from the kinds that have it (help and unit, per kind).

A field's query parameter checks what every kind with that field shares, so that the kind's own
check, which names the kind and its range, says the rest: the type (an integer where every kind
has an integer), finite floats, the lower limit (integers: the least minimum; floats: 0, open
unless some kind takes 0 itself; a float open at 0 also refuses subnormal values, whose inverse
overflows) and an upper limit of 1 when every kind's range ends there (a probability).

The endpoint's signature holds one parameter per field of the kinds known at import
(``with_fixed_fields``), so that FastAPI validates and documents them; a kind registered later
(a test's) is read from the query by ``late_fields`` with the same types.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import Annotated, Any, TypeVar

from fastapi import Query, Request
from fastapi.exceptions import RequestValidationError
from pydantic import AfterValidator, Field, TypeAdapter, ValidationError
from pydantic_core import PydanticCustomError

from app.accounting import registry
from app.accounting.kinds._spec import KindSpec, Mechanism, Param, params_of
from app.api.schemas import MIN_NORMAL_FLOAT, at_least

F = TypeVar("F", bound=Callable[..., Any])


def calibrated_kinds() -> list[KindSpec]:
    """The kinds with a parameter to calibrate, in the registry's order (read when called)."""
    return [s for s in registry.KINDS.values() if s.calibration]


def fixed_fields(kinds: Iterable[KindSpec]) -> dict[str, dict[str, Param]]:
    """field name -> {kind: its ``Param``} over the scalar fields of ``kinds``, in the order
    they are declared, the fields every mechanism has (``count``) last."""
    out: dict[str, dict[str, Param]] = {}
    for s in kinds:
        for p in s.params:
            if p.type != "float_list":
                out.setdefault(p.name, {})[s.name] = p
    common = {p.name for p in params_of(Mechanism)}
    return {n: out[n] for n in sorted(out, key=lambda n: n in common)}


def field_type(params: Mapping[str, Param]) -> Any:
    """The type of the query value fixing a field that ``params`` (kind -> ``Param``) share:
    what every kind's range has in common (the module docstring)."""
    ps = list(params.values())
    integer = all(p.type == "int" for p in ps)
    bounds: dict[str, Any] = {} if integer else {"allow_inf_nan": False}
    floor: list[Any] = []
    minimums = [p.minimum for p in ps]
    if all(m is not None for m in minimums):
        least = min(m for m in minimums if m is not None)
        if integer:
            bounds["ge"] = least
        elif least > 0 or all(p.exclusive_minimum for p in ps if p.minimum == 0):
            bounds["gt"] = 0
            if least == 0:  # open at 0: a subnormal value overflows its inverse (1 / q)
                bounds["json_schema_extra"] = {"minimum": MIN_NORMAL_FLOAT}
                floor = [AfterValidator(at_least(MIN_NORMAL_FLOAT, "the smallest normal float"))]
        elif least == 0:
            bounds["ge"] = 0
    maximums = [p.maximum for p in ps]
    if all(m is not None for m in maximums) and max(m for m in maximums if m is not None) <= 1:
        bounds["lt" if all(p.exclusive_maximum for p in ps) else "le"] = max(
            m for m in maximums if m is not None
        )
    return Annotated[int if integer else float, Field(**bounds), *floor]


def describe(params: Mapping[str, Param]) -> str:
    """Each kind's help and unit for the field (kinds that say the same, together)."""
    said: dict[str, list[str]] = {}
    for kind, p in params.items():
        text = p.help.rstrip(".") + (f" (unit: {p.unit})" if p.unit else "")
        said.setdefault(text, []).append(kind)
    return "; ".join(f"{', '.join(kinds)}: {text}" for text, kinds in said.items()) + "."


def query_annotation(params: Mapping[str, Param]) -> Any:
    """The optional query parameter fixing a field that ``params`` (kind -> ``Param``) share."""
    return Annotated[field_type(params) | None, Query(description=describe(params))]


_KNOWN = fixed_fields(calibrated_kinds())
"""The fields of the kinds known at import: the endpoint's own parameters."""


def with_fixed_fields(after: str) -> Callable[[F], F]:
    """Give an endpoint ``def f(..., **fixed)`` one keyword parameter per field of ``_KNOWN``
    in its signature, after the parameter ``after`` (FastAPI reads ``__signature__``); FastAPI
    passes them in ``fixed``."""

    def decorate(endpoint: F) -> F:
        sig = inspect.signature(endpoint)
        own = [p for p in sig.parameters.values() if p.kind is not p.VAR_KEYWORD]
        clash = sorted(set(_KNOWN) & {p.name for p in own})
        if clash:
            raise TypeError(f"kind fields {clash} clash with {endpoint.__name__}'s own parameters")
        fields = [
            inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=t)
            for name, t in ((n, query_annotation(ps)) for n, ps in _KNOWN.items())
        ]
        at = [p.name for p in own].index(after) + 1
        ordered = [*own[:at], *fields, *own[at:]]
        # keyword-only after positional-or-keyword ones (what inspect requires)
        ordered = [
            p.replace(kind=inspect.Parameter.KEYWORD_ONLY) if i >= at else p
            for i, p in enumerate(ordered)
        ]
        endpoint.__signature__ = sig.replace(parameters=ordered)  # type: ignore[attr-defined]
        return endpoint

    return decorate


def query_names() -> frozenset[str]:
    """Every fixed field's query name (the kinds registered now)."""
    return frozenset(fixed_fields(calibrated_kinds()))


@functools.lru_cache(maxsize=64)
def _adapter_for(key: tuple[tuple[str, Param], ...]) -> TypeAdapter[Any]:
    checked: Any = field_type(dict(key))
    return TypeAdapter(checked)


def late_fields(request: Request) -> dict[str, Any]:
    """The fields of kinds registered after import (not in the signature) that the query gives,
    validated as the signature's are (``RequestValidationError`` naming ``query.<name>``)."""
    given: dict[str, Any] = {}
    errors: list[dict[str, Any]] = []
    for name, params in fixed_fields(calibrated_kinds()).items():
        if name in _KNOWN or name not in request.query_params:
            continue
        try:
            given[name] = _adapter_for(tuple(params.items())).validate_python(
                request.query_params[name]
            )
        except ValidationError as exc:
            errors += [{**e, "loc": ("query", name)} for e in exc.errors()]
    if errors:
        raise RequestValidationError(errors)
    return given


def calibrated_kind(value: str) -> str:
    """``value`` if it names a kind with a parameter to calibrate (now), else the error a
    ``Literal`` of them gives."""
    names = [s.name for s in calibrated_kinds()]
    if value not in names:
        quoted = [repr(n) for n in names]
        expected = quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"
        raise PydanticCustomError(
            "literal_error", "Input should be {expected}", {"expected": expected}
        )
    return value


KindQuery = Annotated[
    str,
    Query(
        description="Mechanism kind to calibrate.",
        json_schema_extra={"enum": [s.name for s in calibrated_kinds()]},
    ),
    AfterValidator(calibrated_kind),
]
"""``mechanism``: a kind with a parameter to calibrate (the registry's now; the OpenAPI enum
lists those known at import)."""


__all__ = [
    "KindQuery",
    "calibrated_kind",
    "calibrated_kinds",
    "describe",
    "field_type",
    "fixed_fields",
    "late_fields",
    "query_annotation",
    "query_names",
    "with_fixed_fields",
]
