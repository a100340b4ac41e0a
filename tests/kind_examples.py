"""The kinds the tests shared by every kind run over, and the parameters each kind declares for
them (``KindSpec.examples``): no test keeps a table of kinds, so a new kind is in those tests by
declaring its examples in its own module.

``ALL`` is every registered kind plus the test-only toy kind (tests/toy_kind.py), so that these
tests show what a new kind meets: ``each_kind`` and ``case`` mark the toy kind's cases
``toy_kind``, which registers it for that test (tests/conftest.py). Tests that go through the
API's models or the golden curve file, built or recorded once, run over ``KINDS`` only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from _pytest.mark import ParameterSet

from app.accounting.kinds import KINDS
from app.accounting.kinds._spec import Examples, KindSpec
from tests import toy_kind as toy

ALL: dict[str, KindSpec] = {**KINDS, toy.NAME: toy.SPEC}
"""Every registered kind, and the test-only one."""


def examples(kind: str) -> Examples:
    """What ``kind`` declares, or a failure saying what to declare."""
    declared = ALL[kind].examples
    assert declared is not None, (
        f"kind {kind!r} declares no examples: add examples=KindSpec.Examples(valid=(...), "
        f"edges=(...), calibration={{...}}) to SPEC in its module (docs/accounting.md, "
        f'"Adding a mechanism kind")'
    )
    return declared


def _wire(kind: str, params: Any) -> dict[str, Any]:
    return {"mechanism": kind, **params}


def example(kind: str, **changes: Any) -> dict[str, Any]:
    """The kind's typical description (its first valid example), with ``changes``."""
    return _wire(kind, {**examples(kind).valid[0], **changes})


def valid(kind: str) -> list[dict[str, Any]]:
    return [_wire(kind, p) for p in examples(kind).valid]


def edges(kind: str) -> list[dict[str, Any]]:
    return [_wire(kind, p) for p in examples(kind).edges]


def calibrations(kind: str) -> list[tuple[str, dict[str, Any]]]:
    """(parameter, the other parameters given) for every calibration of ``kind``: the cases it
    declares, or one with nothing else given."""
    declared = examples(kind).calibration
    assert set(declared) <= set(ALL[kind].calibration), (kind, sorted(declared))
    return [
        (parameter, dict(fixed))
        for parameter in ALL[kind].calibration
        for fixed in declared.get(parameter, ({},))
    ]


def _marks(kind: str) -> tuple[pytest.MarkDecorator, ...]:
    return (pytest.mark.toy_kind,) if kind == toy.NAME else ()


def each_kind(where: Callable[[KindSpec], bool] = lambda spec: True) -> list[ParameterSet]:
    """Every kind of ``ALL`` (``where`` its declaration says so), as a parameter named by it."""
    return [
        pytest.param(name, id=name, marks=_marks(name)) for name, spec in ALL.items() if where(spec)
    ]


def case(kind: str, *values: Any, id: str | None = None) -> ParameterSet:
    """A parameter set of ``kind`` and ``values`` (the toy kind's marked to register it)."""
    return pytest.param(*values, id=id, marks=_marks(kind))


__all__ = ["ALL", "calibrations", "case", "each_kind", "edges", "example", "examples", "valid"]
