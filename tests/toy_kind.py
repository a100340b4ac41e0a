"""A test-only mechanism kind, registered for one test and removed after it (``register``).

``toy_geometric {scale, sensitivity: int = 1, contributions: int = 1}``: the two-sided geometric
mechanism on counts one record changes ``contributions`` of, charged as ``pure_dp`` at epsilon =
contributions * sensitivity / scale. It declares no PLD builder (``pld=None``), like a
contributor's first version of a new kind: the tests check what the service then says about it.
``contributions`` is a field no other kind has (what GET /calibrate must read without a route
edit).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import ClassVar

import numpy as np
import pytest

from app.accounting import registry
from app.accounting.kinds import KINDS
from app.accounting.kinds._spec import MAX_K, MAX_SCALE, MIN_SCALE, KindSpec, Mechanism, UnitCurves
from app.accounting.kinds._spec import param as field_param
from app.accounting.kinds.pure_dp import pure_dp_curves

NAME = "toy_geometric"


@dataclass(frozen=True, slots=True)
class ToyGeometric(Mechanism):
    """Two-sided geometric noise of scale b on integer counts, a record changing
    ``contributions`` of them by at most ``sensitivity`` each: (contributions * sensitivity /
    b)-DP [GRS12]."""

    kind: ClassVar[str] = NAME
    scale: float = field_param(help="Scale b of the noise.", minimum=MIN_SCALE, maximum=MAX_SCALE)
    sensitivity: int = field_param(
        default=1, help="Integer L1 sensitivity.", minimum=1, maximum=MAX_K
    )
    contributions: int = field_param(
        default=1, help="Counts one record changes.", minimum=1, maximum=MAX_K
    )

    @classmethod
    def _raw_curves(cls, units: Sequence[ToyGeometric]) -> UnitCurves:
        return pure_dp_curves(np.array([u.contributions * u.sensitivity / u.scale for u in units]))


SPEC = KindSpec(
    mechanism=ToyGeometric,
    description="A test-only kind: two-sided geometric noise, charged as pure DP.",
    neighbours="Your relation, through the integer L1 sensitivity.",
    pld=None,
    no_pld="has no privacy loss distribution in this test",
    calibration={"scale": "min"},
    examples=KindSpec.Examples(
        valid=({"scale": 20.0, "sensitivity": 2}, {"scale": 5.0}),
        edges=({"scale": MIN_SCALE}, {"scale": MAX_SCALE, "sensitivity": MAX_K, "count": 1000}),
        calibration={"scale": ({"sensitivity": 1}, {"sensitivity": MAX_K})},
    ),
)


def register(monkeypatch: pytest.MonkeyPatch) -> KindSpec:
    """``SPEC`` in the registry (``registry.spec``, ``kind_names``, ``mechanism_from_dict``
    and what reads them at call time, calibration's table ``calibration.PARAMETERS`` among
    them) until ``monkeypatch`` undoes it; the API's models, built at import, do not see it. The
    ``toy_kind`` fixture, and any test case marked ``toy_kind`` (tests/conftest.py)."""
    monkeypatch.setattr(registry, "KINDS", MappingProxyType({**KINDS, NAME: SPEC}))
    return SPEC
