"""``GET /calibrate``: the least noise / largest epsilon / most steps that still fits."""

from __future__ import annotations

from typing import Any

from app.accounting.calibration import PARAMETERS, calibrate, default_parameter, filter_fits
from app.accounting.filters import FilterKind
from app.db.engine import Database
from app.services.curves import finite_or_none, spend_of, spent_json
from app.services.datasets import active_reservations_curve, find_dataset
from app.services.errors import BudgetExceeded, Unprocessable
from app.services.keys import Principal


def calibrate_next(
    db: Database,
    principal: Principal,
    ref: str,
    kind: str,
    parameter: str | None,
    fixed: dict[str, Any],
) -> dict[str, Any]:
    """Calibrate the next invocation of ``kind`` against the dataset's remaining budget
    (active reservations count as spent), under the dataset's filter."""
    parameter = parameter or default_parameter(kind)
    if parameter not in PARAMETERS[kind]:
        raise Unprocessable(f"{kind}: can calibrate {sorted(PARAMETERS[kind])}, not {parameter!r}")
    fixed = {k: v for k, v in fixed.items() if k != parameter}
    if kind == "subsampled_gaussian" and "sample_rate" not in fixed:
        raise Unprocessable("subsampled_gaussian needs sample_rate (and steps or sigma)")
    if kind == "subsampled_gaussian" and parameter == "steps" and "sigma" not in fixed:
        raise Unprocessable("calibrating steps needs sigma")
    allowed_fields = {
        "gaussian": {"sensitivity", "count"},
        "laplace": {"sensitivity", "count"},
        "randomized_response": {"k", "count"},
        "rappor": {"count"},
        "subsampled_gaussian": {"sample_rate", "steps", "sigma", "count"},
        "discrete_laplace": {"sensitivity", "count"},
    }[kind]
    extra = sorted(set(fixed) - allowed_fields)
    if extra:
        raise Unprocessable(f"{kind} does not take {extra}")
    if kind == "laplace" and parameter == "epsilon":
        fixed.pop("sensitivity", None)
    if kind == "discrete_laplace" and "sensitivity" in fixed:
        s = fixed["sensitivity"]
        if float(s) != int(s):
            raise Unprocessable(f"discrete_laplace sensitivity must be an integer, got {s}")
        fixed["sensitivity"] = int(s)
    with db.read() as s:
        st = find_dataset(s, ref, principal)
        held = active_reservations_curve(s, st.dataset.id)
    ds = st.dataset
    if ds.allowed_mechanisms is not None and kind not in ds.allowed_mechanisms:
        raise Unprocessable(f"mechanism {kind!r} is not allowed on dataset {ds.name!r}")
    total = st.curve if held is None else st.curve + held[0]
    kind_f = FilterKind(ds.filter)
    fits = filter_fits(kind_f, total, ds.budget_epsilon, ds.budget_delta, ds.filter_bound)
    try:
        result = calibrate(kind, fixed, parameter, fits)
    except ValueError as exc:
        raise Unprocessable(str(exc)) from None
    if result is None:
        raise BudgetExceeded(
            f"no {parameter} in the allowed range fits the remaining budget of {ds.name!r}",
            dataset_id=ds.id,
            budget={"epsilon": ds.budget_epsilon, "delta": ds.budget_delta},
        )
    after = st.curve + result.curve
    value: float | int = int(result.value) if parameter == "steps" else result.value
    mechanism = result.mechanism.to_dict()
    if kind == "laplace" and "sensitivity" in fixed and parameter == "scale":
        mechanism = {
            "mechanism": "laplace",
            "scale": value,
            "sensitivity": fixed["sensitivity"],
            "count": result.mechanism.count,
        }
    return {
        "dataset_id": ds.id,
        "mechanism": mechanism,
        "parameter": parameter,
        "value": value,
        "direction": PARAMETERS[kind][parameter],
        "adds": {
            "rho": finite_or_none(result.curve.rho),
            "pure_epsilon": finite_or_none(result.curve.pure_eps),
        },
        "spent_after": spent_json(ds, after, spend_of(ds, after)),
        "filter": ds.filter,
    }


__all__ = ["calibrate_next"]
