"""``GET /v1/mechanisms``: the registry of mechanism kinds, as clients and the dashboard see it.

Everything here is derived from ``app.accounting.registry`` (each kind's declaration in its own
module); nothing is restated.
"""

from __future__ import annotations

import math
from typing import Any

from app import responses as r
from app.accounting import registry
from app.accounting.kinds._spec import REQUIRED, KindSpec, Param
from app.db.engine import Database
from app.principal import Caller
from app.services.auth import authenticated


def _number(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)


def _default(p: Param) -> Any:
    return None if p.default is REQUIRED else p.default


def _field(p: Param) -> r.MechanismField:
    return r.MechanismField(
        name=p.name,
        type=p.type,
        required=p.required,
        default=_default(p),
        minimum=_number(p.minimum),
        maximum=_number(p.maximum),
        exclusive_minimum=p.exclusive_minimum,
        exclusive_maximum=p.exclusive_maximum,
        max_items=p.max_items,
        unit=p.unit,
        help=p.help,
    )


def _kind(s: KindSpec) -> r.MechanismKind:
    return r.MechanismKind(
        name=s.name,
        title=s.title,
        description=s.description,
        neighbours=s.neighbours,
        fields=[_field(p) for p in s.params],
        one_of=[list(g) for g in s.one_of],
        calibration=dict(s.calibration),
        accountings=list(s.accountings),
        pld=s.pld is not None,
        own_delta=any(p.name == "delta" for p in s.params),
        dp_events=sorted(s.dp_events),
        next_query=None
        if s.next_query is None
        else r.NextQuery(fixed=dict(s.next_query.fixed), words=s.next_query.words),
    )


def catalogue() -> r.MechanismCatalogue:
    """Every kind of the registry with its fields, description and what accepts it."""
    return r.MechanismCatalogue(
        mechanisms=[_kind(registry.spec(k)) for k in registry.kind_names()],
        dp_events=registry.dp_event_types(),
    )


def list_mechanisms(db: Database, caller: Caller) -> r.MechanismCatalogue:
    """``catalogue()`` for any valid key."""
    authenticated(db, caller)
    return catalogue()


__all__ = ["catalogue", "list_mechanisms"]
