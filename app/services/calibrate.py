"""``GET /calibrate``: the least noise / largest epsilon / most steps that still fits."""

from __future__ import annotations

from typing import Any

from app import responses as r
from app.accounting import registry
from app.accounting.calibration import (
    PARAMETERS,
    AllFit,
    Calibration,
    Fits,
    calibrate,
    default_parameter,
    envelope,
    fits_under,
)
from app.accounting.curve import PrivacyCurve
from app.accounting.mechanisms import mechanism_from_dict
from app.accounting.pld_filter import PldFilter
from app.db.engine import Database
from app.errors import BudgetExceeded, Unprocessable
from app.principal import Caller
from app.services import admission, answers, state
from app.services.auth import authenticated
from app.services.state import DatasetState


def _fields(kind: str) -> set[str]:
    """The fields of ``kind`` a calibration may fix (its parameters, from the registry)."""
    return {p.name for p in registry.spec(kind).params}


def _required(kind: str) -> set[str]:
    """The fields of ``kind`` that have no default."""
    return {p.name for p in registry.spec(kind).params if p.required}


PLD_STEPS = 64
"""At most this many 1 % steps toward less privacy loss when a PLD does not confirm an answer."""


def _confirmed_by_pld(
    st: DatasetState, kind: str, fixed: dict[str, Any], parameter: str, result: Calibration
) -> Calibration | None:
    """On a ``pld`` dataset the search runs on the curve rule (the non-adaptive RDP conversions:
    valid, usually more conservative than the PLD, and fast); the answer is then checked with
    the PLD the dataset admits by, and stepped by 1 % toward less loss until it fits (bounded)."""
    assert st.pld is not None
    pf = PldFilter(st.budget)
    direction = PARAMETERS[kind][parameter]
    value = result.value
    for _ in range(PLD_STEPS):
        mechanism = mechanism_from_dict({"mechanism": kind, **fixed, parameter: value})
        new = admission.entry_pld(st, mechanism.to_dict())
        if pf.dry_run(st.pld, st.pld_held, new).admitted:
            return Calibration(mechanism, parameter, value, mechanism.curve())
        if parameter == "steps":
            value = float(int(value * 0.99))
            if value < 1:
                return None
        else:
            value = value * 1.01 if direction == "min" else value / 1.01
    return None


def _with_holds(committed: PrivacyCurve, held: PrivacyCurve | None) -> PrivacyCurve:
    return committed if held is None else committed + held


def _structure_fits(st: DatasetState, ask: admission.Ask) -> Fits:
    """The limits a charge with ``ask``'s allocation and blocks must fit, as admission checks
    them (``admission.decide_structures``): the dataset's budget (on a partitioned dataset its
    lifetime budget, if any), each block's budget, the allocation's (per block on a
    partitioned dataset). The blocks of one budget count as one limit: their envelope (the
    pointwise largest of their curves, active holds included), so the work does not grow with
    the span; exact when one block has spent the most at every order, otherwise the answer
    errs toward more noise."""
    t = ask.target
    fits = []
    if st.partition_unit is None:
        fits.append(fits_under(st.filter, _with_holds(st.committed, st.held_curve)))
    elif st.lifetime is not None:
        fits.append(fits_under(st.lifetime, _with_holds(st.committed, st.held_curve)))
    if t is not None:
        for group in (t.blocks, t.allocation_blocks):
            if group:
                curves = [_with_holds(b.committed, b.held.total()) for b in group]
                fits.append(fits_under(group[0].filter, envelope(curves)))
        a = t.allocation
        if a is not None and st.partition_unit is None:
            fits.append(fits_under(a.filter, _with_holds(a.committed, a.held.total())))
    return fits[0] if len(fits) == 1 else AllFit(tuple(fits))


def calibrate_next(
    db: Database,
    caller: Caller,
    ref: str,
    kind: str,
    parameter: str | None,
    fixed: dict[str, Any],
    allocation: str | None = None,
    blocks: tuple[str, str] | None = None,
) -> r.Calibration:
    """Calibrate the next invocation of ``kind`` against the dataset's remaining budget
    (active reservations count as spent), under the dataset's filter; with an ``allocation``
    and (on a partitioned dataset, required) the ``blocks`` the invocation reads, against
    every limit a charge with them must fit."""
    parameter = parameter or default_parameter(kind)
    if parameter not in PARAMETERS[kind]:
        raise Unprocessable(f"{kind}: can calibrate {sorted(PARAMETERS[kind])}, not {parameter!r}")
    fixed = {k: v for k, v in fixed.items() if k != parameter}
    if kind == "subsampled_gaussian" and "sample_rate" not in fixed:
        raise Unprocessable("subsampled_gaussian needs sample_rate (and steps or sigma)")
    if kind == "subsampled_gaussian" and parameter == "steps" and "sigma" not in fixed:
        raise Unprocessable("calibrating steps needs sigma")
    extra = sorted(set(fixed) - _fields(kind))
    if extra:
        raise Unprocessable(f"{kind} does not take {extra}")
    missing = sorted(_required(kind) - set(fixed) - {parameter})
    if missing:
        raise Unprocessable(f"calibrating {kind} {parameter} needs {missing}")
    if kind == "laplace" and parameter == "epsilon":
        fixed.pop("sensitivity", None)
    if kind == "discrete_laplace" and "sensitivity" in fixed:
        s = fixed["sensitivity"]
        if float(s) != int(s):
            raise Unprocessable(f"discrete_laplace sensitivity must be an integer, got {s}")
        fixed["sensitivity"] = int(s)
    with db.read() as s:
        principal = authenticated(db, caller, s)
        st = state.load(s, ref, principal)
        if st.is_pld:
            state.load_pld(s, st)
        # the limits a charge with this allocation and these blocks would meet (without
        # either, on a dataset that is not partitioned: its own budget alone, no read)
        ask = admission.Ask(kind, 1, {}, PrivacyCurve.zero(), allocation=allocation, blocks=blocks)
        fits = _structure_fits(st, admission.prepare(s, st, ask))
    if st.allowed_mechanisms is not None and kind not in st.allowed_mechanisms:
        raise Unprocessable(f"mechanism {kind!r} is not allowed on dataset {st.name!r}")
    admission.check_entry_delta(st, kind, float(fixed.get("delta", 0.0)))
    f = st.filter
    try:
        result = calibrate(kind, fixed, parameter, fits)
        if result is not None and st.is_pld:
            result = _confirmed_by_pld(st, kind, fixed, parameter, result)
    except ValueError as exc:
        raise Unprocessable(str(exc)) from None
    if result is None:
        raise BudgetExceeded(
            f"no {parameter} in the allowed range fits the remaining budget of {st.name!r}",
            dataset_id=st.id,
            budget=answers.budget(st).model_dump(mode="json"),
        )
    after = st.committed + result.curve
    value: float | int = int(result.value) if parameter == "steps" else result.value
    mechanism = result.mechanism.to_dict()
    if kind == "laplace" and "sensitivity" in fixed and parameter == "scale":
        mechanism = {
            "mechanism": "laplace",
            "scale": value,
            "sensitivity": fixed["sensitivity"],
            "count": result.mechanism.count,
        }
    return r.Calibration(
        dataset_id=st.id,
        mechanism=mechanism,
        parameter=parameter,
        value=value,
        direction=PARAMETERS[kind][parameter],
        adds=r.Adds(
            rho=answers.finite_or_none(result.curve.rho),
            pure_epsilon=answers.finite_or_none(result.curve.pure_eps),
        ),
        spent_after=answers.spent(st, after, f.spend(after)),
        filter=f.kind.value,
    )


__all__ = ["calibrate_next"]
