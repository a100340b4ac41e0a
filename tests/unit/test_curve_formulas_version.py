"""A change to a mechanism's curve must bump ``CURVE_FORMULAS_VERSION``.

Stored entry curves are re-derived from their mechanisms once per version
(``app.services.verification.rederive_if_formulas_changed``); a formula changed without the bump
leaves every database written before it with curves that ``verify`` flags and, if the change
corrected a value below the exact one, with totals below what the ledger's mechanisms imply.

This is a change detector, not an oracle: ``tests/golden/curve_formulas.json`` holds the curves
this code gave for a fixed set of mechanisms (every kind, extremes of its ranges), written by
``python -m tests.unit.test_curve_formulas_version --write`` under the version it names (a new
kind's rows, appended to ``MECHANISMS``, are recorded with ``--add``, which keeps the others). The
test recomputes them and applies ``verify``'s own staleness rule (``verification._stale_curves``:
relative 1e-12, where a different CPU's last-ulp differences stay far below it, or twice the
spread a kind declares where they do not: the file was written on an AVX-512 machine, and on
an AVX2 one two DP-SGD curves at small sample rates differed by up to 3e-7 of a value, within
the signed series' certified width). The values' correctness is tested against the oracles
elsewhere (test_oracles, test_golden_vectors, ...)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np
import pytest

from app.accounting.mechanisms import mechanism_from_dict
from app.accounting.orders import CURVE_FORMULAS_VERSION, ORDERS
from app.services.verification import _close, _stale_curves
from tests.kind_examples import edges, valid

GOLDEN = Path(__file__).resolve().parent.parent / "golden" / "curve_formulas.json"

MECHANISMS: list[dict[str, Any]] = [
    *(
        {"mechanism": "gaussian", "sigma": s, "sensitivity": d}
        for s, d in ((1e-3, 1e-3), (4.0, 2.0), (1e6, 1.0), (0.5, 1.0))
    ),
    *({"mechanism": "laplace", "epsilon": e} for e in (1e-9, 1e-3, 0.3, 1.0, 5.0, 50.0)),
    *({"mechanism": "pure_dp", "epsilon": e} for e in (1e-6, 0.7, 3.0, 20.0)),
    *({"mechanism": "exponential", "epsilon": e} for e in (1e-6, 0.8, 4.0, 30.0)),
    *(
        {"mechanism": "randomized_response", "epsilon": e, "k": k}
        for e, k in ((1e-6, 2), (1.0, 4), (3.0, 2), (8.0, 100), (0.43674653333437363, 7))
    ),
    *({"mechanism": "rappor", "epsilon": e} for e in (1e-4, 2.0, 10.0)),
    *(
        {"mechanism": "discrete_laplace", "epsilon": e, "sensitivity": d}
        for e, d in ((1e-4, 1), (1.0, 3), (6.0, 1), (0.05, 40))
    ),
    *({"mechanism": "zcdp", "rho": r} for r in (1e-9, 0.02, 3.0)),
    {"mechanism": "zcdp", "rho": 0.01, "delta": 1e-8},
    *({"mechanism": "approx_dp", "epsilon": e, "delta": d} for e, d in ((0.5, 1e-7), (3.0, 1e-5))),
    {"mechanism": "rdp", "orders": [2.0, 8.0, 64.0], "epsilons": [0.1, 0.3, 2.0]},
    {"mechanism": "rdp", "orders": [1.5, 32.0], "epsilons": [0.01, 1.5], "delta": 1e-9},
    *(
        {"mechanism": "subsampled_gaussian", "sigma": s, "sample_rate": q, "steps": t}
        for s, q, t in (
            (2.0, 0.01, 10),
            (0.65, 1e-6, 1000),
            (1.1, 0.004, 5000),
            (0.6, 0.05, 100),
            (3.0, 1e-4, 20),
            (1000.0, 0.5, 1),
            (1e-3, 5e-324, 1),
            (1.0, 5e-324, 1),
            (1e6, 5e-324, 1),
            (1.0, 1 - 1e-12, 1),
            (30.0, 1e-9, 1),
        )
    ),
    {
        "mechanism": "subsampled_gaussian",
        "sigma": 2.0,
        "sample_rate": 0.01,
        "steps": 1,
        "sensitivity": 2.0,
    },
    # version 4: approx_dp epsilons whose square underflows
    *(
        {"mechanism": "approx_dp", "epsilon": e, "delta": d}
        for e, d in ((1e-200, 0.0), (1e-155, 1e-9), (0.0, 1e-6))
    ),
]


def _curves() -> list[dict[str, Any]]:
    """Each mechanism and its curve as a ledger entry stores it (repetitions included)."""
    out = []
    for m in MECHANISMS:
        curve = mechanism_from_dict(m).curve()
        out.append(
            {
                "mechanism": m,
                "rho": curve.rho,
                "rdp": curve.rdp.tolist(),
                "pure_eps": curve.pure_eps,
                "delta": curve.delta,
            }
        )
    return out


def _column(rows: list[dict[str, Any]], name: str) -> np.ndarray[Any, np.dtype[np.float64]]:
    return np.array([float(r[name]) for r in rows])


def test_curves_match_the_version_they_were_recorded_under() -> None:
    golden = json.loads(GOLDEN.read_text())
    assert golden["curve_formulas_version"] == CURVE_FORMULAS_VERSION, (
        "CURVE_FORMULAS_VERSION changed: write the new curves with "
        "`python -m tests.unit.test_curve_formulas_version --write`"
    )
    assert golden["orders"] == ORDERS.tolist()
    stored = golden["curves"]
    assert [row["mechanism"] for row in stored] == MECHANISMS
    fresh = _curves()
    stale = _stale_curves(
        [mechanism_from_dict(m) for m in MECHANISMS],
        _column(stored, "rho"),
        np.array([row["rdp"] for row in stored], dtype=np.float64),
    )
    for name in ("pure_eps", "delta"):
        stale |= ~_close(_column(fresh, name), _column(stored, name))
    changed = [MECHANISMS[i] for i in np.flatnonzero(stale)]
    assert not changed, (
        "these mechanisms' curves changed beyond verify's tolerance: bump "
        "CURVE_FORMULAS_VERSION (app/accounting/orders.py, so that stored curves are re-derived) "
        f"and write the new curves with --write: {changed}"
    )


def test_the_set_covers_every_kind() -> None:
    """A change detector on purpose: the set is recorded, not derived, so a new kind adds
    itself here (the message says how) and records its curves without touching the others'."""
    from app.accounting.kinds import KINDS

    missing = [kind for kind in KINDS if kind not in {m["mechanism"] for m in MECHANISMS}]
    rows = "".join(
        f"    {wire!r},\n"
        for kind in missing
        for wire in (*valid(kind), *edges(kind))  # the examples it declares
    )
    assert not missing, (
        f"kind(s) {missing} have no curve in the recorded set: append these rows (its declared "
        f"examples; keep or trim them) to MECHANISMS in tests/unit/test_curve_formulas_version.py"
        f"\n{rows}then record their curves with "
        "`python -m tests.unit.test_curve_formulas_version --add` (the recorded curves of the "
        "other kinds stay as they are)"
    )
    assert {m["mechanism"] for m in MECHANISMS} == set(KINDS)


def test_a_new_kind_is_told_the_rows_to_add(monkeypatch: pytest.MonkeyPatch) -> None:
    from app.accounting import kinds
    from tests import toy_kind as toy

    monkeypatch.setattr(kinds, "KINDS", MappingProxyType({**kinds.KINDS, toy.NAME: toy.SPEC}))
    with pytest.raises(AssertionError) as failed:
        test_the_set_covers_every_kind()
    assert "{'mechanism': 'toy_geometric', 'scale': 20.0, 'sensitivity': 2},\n" in str(failed.value)
    assert "to MECHANISMS in tests/unit/test_curve_formulas_version.py" in str(failed.value)
    assert "test_curve_formulas_version --add`" in str(failed.value)


def _added() -> list[dict[str, Any]]:
    """The recorded rows, and the curves of ``MECHANISMS`` appended since (``--add``)."""
    stored = json.loads(GOLDEN.read_text())["curves"]
    kept = [row["mechanism"] for row in stored]
    if MECHANISMS[: len(kept)] != kept:
        raise SystemExit("--add appends rows: the recorded ones must stay first, unchanged")
    fresh = _curves()
    return [*stored, *fresh[len(kept) :]]


if __name__ == "__main__" and sys.argv[1:] in (["--write"], ["--add"]):
    GOLDEN.parent.mkdir(exist_ok=True)
    document = {
        "curve_formulas_version": CURVE_FORMULAS_VERSION,
        "orders": ORDERS.tolist(),
        "curves": _curves() if sys.argv[1:] == ["--write"] else _added(),
    }
    curves = ",\n".join(json.dumps(c) for c in document.pop("curves"))  # one curve per line
    head = json.dumps(document)[:-1]
    GOLDEN.write_text(f'{head}, "curves": [\n{curves}\n]}}\n')
    print(f"wrote {GOLDEN}")
