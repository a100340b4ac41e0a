"""Pure accounting core: mechanisms -> privacy curves -> (epsilon, delta).

Imports only the standard library, numpy and scipy, so it can be read and tested alone.
Modules, in reading order:

* ``orders``       the fixed grid of Renyi orders
* ``curve``        ``PrivacyCurve`` (rho, RDP vector, pure-DP sum) and sound addition
* ``kinds``        one module per mechanism kind: its fields, validation, curve, calibration
                   parameters, DpEvent translation and description (``KINDS``)
* ``registry``     what is derived from the kinds: parsing, the calibration table, DpEvent dicts
* ``mechanisms``   the mechanism value objects, re-exported
* ``compose``      ``compose_many``: many mechanisms (or stored curves) composed at once
* ``conversions``  zCDP / RDP / Gaussian-only / pure DP -> (epsilon, delta) and back
* ``filters``      ``Filter``: a dataset's admission rule, its dry run and the spend it reports
* ``calibration``  inverse questions: least noise / largest epsilon that still fits

The names below are imported on first use (PEP 562): ``import app.accounting.registry`` (the
command line's flags) does not load scipy.signal, scipy.stats and every other module of the core.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from app.accounting.compose import compose_arrays, compose_many
    from app.accounting.curve import PrivacyCurve
    from app.accounting.filters import (
        Budget,
        DryRun,
        Filter,
        FilterKind,
        Remaining,
        Spend,
        admits,
        filter_kind,
        spend,
    )
    from app.accounting.mechanisms import (
        DiscreteLaplace,
        Gaussian,
        Laplace,
        Mechanism,
        RandomizedResponse,
        Rappor,
        SubsampledGaussian,
        mechanism_from_dict,
    )
    from app.accounting.orders import ORDERS, ORDERS_VERSION
    from app.accounting.registry import KINDS, mechanisms_from_dp_event

_HOME = {
    **dict.fromkeys(("compose_arrays", "compose_many"), "compose"),
    "PrivacyCurve": "curve",
    **dict.fromkeys(
        (
            "Budget",
            "DryRun",
            "Filter",
            "FilterKind",
            "Remaining",
            "Spend",
            "admits",
            "filter_kind",
            "spend",
        ),
        "filters",
    ),
    **dict.fromkeys(
        (
            "DiscreteLaplace",
            "Gaussian",
            "Laplace",
            "Mechanism",
            "RandomizedResponse",
            "Rappor",
            "SubsampledGaussian",
            "mechanism_from_dict",
        ),
        "mechanisms",
    ),
    **dict.fromkeys(("ORDERS", "ORDERS_VERSION"), "orders"),
    **dict.fromkeys(("KINDS", "mechanisms_from_dp_event"), "registry"),
}
"""Where each re-exported name lives."""


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value


__all__ = [
    "KINDS",
    "ORDERS",
    "ORDERS_VERSION",
    "Budget",
    "DiscreteLaplace",
    "DryRun",
    "Filter",
    "FilterKind",
    "Gaussian",
    "Laplace",
    "Mechanism",
    "PrivacyCurve",
    "RandomizedResponse",
    "Rappor",
    "Remaining",
    "Spend",
    "SubsampledGaussian",
    "admits",
    "compose_arrays",
    "compose_many",
    "filter_kind",
    "mechanism_from_dict",
    "mechanisms_from_dp_event",
    "spend",
]
