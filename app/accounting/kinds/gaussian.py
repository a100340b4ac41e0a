"""``gaussian``: the Gaussian mechanism f(x) + N(0, sigma^2 I)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from app.accounting.closed_forms import gaussian_rho_up
from app.accounting.kinds._events import NO_NOISE, DpEventError, at, number, outside, sign
from app.accounting.kinds._spec import (
    MAX_RATIO,
    MAX_SCALE,
    MIN_RATIO,
    MIN_SCALE,
    Affine,
    KindSpec,
    Mechanism,
    NextQuery,
    Translate,
    column,
    event_number,
    param,
)


@dataclass(frozen=True, slots=True)
class Gaussian(Mechanism):
    """Gaussian mechanism f(x) + N(0, sigma^2 I).

    Convention: ``sensitivity`` is the L2 sensitivity Delta under whatever neighbouring relation
    the caller uses (add/remove or replace-one; e.g. a histogram has Delta = 1 under add/remove,
    sqrt 2 under replace-one); ``sigma`` is the standard deviation of the noise (not the noise
    multiplier). rho = Delta^2 / (2 sigma^2) and eps(alpha) = alpha rho exactly
    [BS16 Lemma 16/17, Prop 6; M17 Table II]. Never pure DP.
    """

    kind: ClassVar[str] = "gaussian"
    sigma: float = param(
        help="Standard deviation of the noise.",
        unit="units of the query",
        minimum=MIN_SCALE,
        maximum=MAX_SCALE,
    )
    sensitivity: float = param(
        default=1.0,
        help="L2 sensitivity of the query under your neighbouring relation.",
        unit="units of the query",
        minimum=MIN_SCALE,
        maximum=MAX_SCALE,
    )

    def validate(self) -> None:
        ratio = self.sensitivity / self.sigma
        if not MIN_RATIO <= ratio <= MAX_RATIO:
            raise ValueError(
                f"sensitivity / sigma must be in [{MIN_RATIO:g}, {MAX_RATIO:g}], got {ratio!r}"
            )

    @classmethod
    def _affine(cls, units: Sequence[Gaussian]) -> Affine:
        sens, sigma = column(units, "sensitivity"), column(units, "sigma")
        ratio = sens / sigma
        slope = 0.5 * ratio * ratio  # the RDP gets the kinds' evaluation margin (unit_curves)
        rho = gaussian_rho_up(sens, sigma)
        n = rho.size
        return Affine(slope, np.zeros(n), rho, np.full(n, math.inf), np.zeros(n), True)


def _from_gaussian_event(event: Mapping[str, Any], translate: Translate) -> list[Mechanism]:
    """``GaussianDpEvent(noise_multiplier)``: sigma = noise multiplier, sensitivity 1."""
    nm = event_number(event, "noise_multiplier")
    if nm <= 0:
        raise ValueError("GaussianDpEvent with noise_multiplier 0 is not differentially private")
    return [Gaussian(sigma=nm)]


def _check_gaussian_event(event: Mapping[str, Any], path: str, depth: int) -> Mapping[str, Any]:
    """Its noise multiplier is the sigma of a Gaussian of sensitivity 1: in sigma's range."""
    where = at("GaussianDpEvent", path)
    nm = number(event, "noise_multiplier")
    if nm is None:
        return event
    sign(where, "noise_multiplier", nm, path, zero=NO_NOISE)
    why = outside(SPEC.param("sigma"), nm)
    if why is not None:
        raise DpEventError(
            f"{where}: noise_multiplier {nm!r} (the Gaussian's sigma at sensitivity 1) is {why}",
            path,
        )
    return event


SPEC = KindSpec(
    mechanism=Gaussian,
    description="Gaussian noise added to a query of bounded L2 sensitivity.",
    neighbours="Your relation, through the L2 sensitivity; sigma is the noise standard deviation.",
    pld="gaussian",
    calibration={"sigma": "min"},
    dp_events={"GaussianDpEvent": _from_gaussian_event},
    dp_event_checks={"GaussianDpEvent": _check_gaussian_event},
    title="Gaussian",
    next_query=NextQuery({"sensitivity": 1}, "sensitivity 1"),
    examples=KindSpec.Examples(
        valid=(
            {"sigma": 4.0, "sensitivity": 2.0},
            {"sigma": 3.0},
            {"sigma": 20.0, "sensitivity": 1.0},
        ),
        edges=(
            {"sigma": 1e-6},
            {"sigma": 1e6, "count": 1000},
            {"sigma": 1e-3, "sensitivity": 1e-3},
        ),
        calibration={
            "sigma": (
                {"sensitivity": 2.0, "count": 3},
                {"sensitivity": 1.0},
                {"sensitivity": 1e-6},
                {"sensitivity": 1e12},
            )
        },
    ),
)
