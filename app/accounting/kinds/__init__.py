"""The mechanism kinds: one module each, collected into ``KINDS`` by discovery.

Every module here whose name does not start with ``_`` defines ``SPEC: KindSpec`` (its value
object, fields, curve, calibration parameters, DpEvent translations and description). Adding a
kind is adding one module (and its tests); everything else is derived from ``KINDS``. What a
``KindSpec`` declares and which tests a new kind adds: docs/accounting.md, "Adding a mechanism
kind".
"""

from __future__ import annotations

import importlib
import pkgutil
from types import MappingProxyType

from app.accounting.kinds._spec import KindSpec, Mechanism, Param, UnitCurves


def _discover() -> dict[str, KindSpec]:
    found: dict[str, KindSpec] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        spec = getattr(module, "SPEC", None)
        if not isinstance(spec, KindSpec):
            raise TypeError(f"kind module {module.__name__} defines no SPEC")
        if spec.name != info.name:
            raise TypeError(f"kind module {info.name} declares kind {spec.name!r}")
        found[spec.name] = spec
    return found


KINDS: MappingProxyType[str, KindSpec] = MappingProxyType(_discover())
"""Every mechanism kind by its wire name, in alphabetical order."""

__all__ = ["KINDS", "KindSpec", "Mechanism", "Param", "UnitCurves"]
