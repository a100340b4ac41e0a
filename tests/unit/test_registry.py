"""The registry of mechanism kinds: every kind's declaration is complete and consistent, and what
is derived from it (parsing, validation, calibration table) behaves the same for every kind."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from app.accounting import registry
from app.accounting.adaptive import STEEP_CURVE_KINDS
from app.accounting.calibration import PARAMETERS
from app.accounting.curve import compose
from app.accounting.kinds import KINDS
from app.accounting.kinds._spec import REQUIRED, Mechanism
from app.accounting.mechanisms import MECHANISMS, mechanism_from_dict
from tests import toy_kind as toy
from tests.kind_examples import calibrations, each_kind, edges, example, valid


def _example(kind: str, **changes) -> Mechanism:
    """The kind's typical description (``KindSpec.examples``), through the registry."""
    return mechanism_from_dict(example(kind, **changes))


def test_every_kind_declares_examples_and_has_a_module_of_its_name() -> None:
    assert list(KINDS) == registry.kind_names()
    assert not [k for k, s in KINDS.items() if s.examples is None], "declare examples= in SPEC"
    assert dict(MECHANISMS) == {k: s.mechanism for k, s in KINDS.items()}
    for name, spec in KINDS.items():
        assert spec.name == name == spec.mechanism.kind
        assert spec.mechanism.__module__ == f"app.accounting.kinds.{name}"


@pytest.mark.parametrize("kind", each_kind())
def test_declaration_is_complete(kind: str) -> None:
    spec = registry.spec(kind)
    assert spec.description.endswith(".") and "\n" not in spec.description
    assert spec.neighbours.endswith(".") and "\n" not in spec.neighbours
    assert spec.mechanism.__doc__ and "[" in spec.mechanism.__doc__  # cites its source
    names = [p.name for p in spec.params]
    assert names[-1] == "count" and len(set(names)) == len(names)
    for p in spec.params:
        assert p.help.endswith(".") and "\n" not in p.help, p
        assert p.cli_help and p.flag == "--" + p.name.replace("_", "-")
        assert p.minimum is not None and p.maximum is not None and p.minimum < p.maximum
        assert p.type in ("float", "int", "float_list")
    for group in spec.one_of:
        assert all(n in names for n in group)
    for parameter, direction in spec.calibration.items():
        assert direction in ("min", "max")
        assert spec.param(parameter).type in ("float", "int")
    for wire in (*valid(kind), *edges(kind)):  # every example is a valid description
        assert mechanism_from_dict(wire).kind == kind
    for parameter, fixed in calibrations(kind):
        assert parameter not in fixed and set(fixed) <= set(names), (parameter, fixed)


def test_the_kind_attributes_other_modules_read_are_declared_by_the_kinds() -> None:
    """``STEEP_CURVE_KINDS`` (the order an adaptive rdp dataset fixes) and calibrate's
    epsilon-DP first guess read each kind's declaration, not lists of names. The sets are
    pinned: a change of the first moves the order of new datasets."""
    assert STEEP_CURVE_KINDS == {k for k, s in KINDS.items() if s.steep_curve}
    assert STEEP_CURVE_KINDS == {"rdp", "subsampled_gaussian"}
    pure = {k for k, s in KINDS.items() if s.pure_calibration}
    assert pure == {
        "approx_dp",
        "discrete_laplace",
        "exponential",
        "laplace",
        "pure_dp",
        "randomized_response",
        "rappor",
    }
    for kind in pure:  # its calibrated parameter is its epsilon (or a scale of it)
        assert set(KINDS[kind].calibration) & {"epsilon", "scale"}
        assert math.isfinite(_example(kind).curve().pure_eps)


def test_calibration_table_is_derived_from_the_registry() -> None:
    assert PARAMETERS == {k: dict(s.calibration) for k, s in KINDS.items()}
    assert registry.calibration_parameters() == PARAMETERS


@pytest.mark.parametrize("kind", each_kind())
def test_round_trip_through_the_wire_form(kind: str) -> None:
    m = _example(kind, count=3)
    data = m.to_dict()
    assert data["mechanism"] == kind and data["count"] == 3
    again = mechanism_from_dict({**data, "v": 1})
    assert again == m and hash(again) == hash(m)
    assert again.curve() == m.curve()


@pytest.mark.parametrize("kind", each_kind())
def test_count_is_repetition_and_composition_adds(kind: str) -> None:
    once = _example(kind).curve()
    thrice = _example(kind, count=3).curve()
    assert thrice == compose([once, once, once]) or np.allclose(
        thrice.rdp, (once + once + once).rdp, rtol=1e-15
    )
    assert thrice.delta == pytest.approx(3 * once.delta, rel=1e-15)
    assert (thrice.rdp >= 3 * once.rdp * (1 - 1e-15)).all()
    assert _example(kind).repeated(5).curve() == _example(kind, count=5).curve()


@pytest.mark.parametrize("kind", each_kind())
def test_unknown_and_missing_fields_are_named(kind: str) -> None:
    with pytest.raises(ValueError, match="bogus"):
        mechanism_from_dict(example(kind, bogus=1))
    for p in registry.spec(kind).params:
        if p.required:
            data = {k: v for k, v in example(kind).items() if k != p.name}
            with pytest.raises(ValueError, match=p.name):
                mechanism_from_dict(data)


def _bad_values(p) -> list:
    lo = p.minimum - (abs(p.minimum) * 0.5 + 1.0) if p.type != "int" else int(p.minimum) - 1
    hi = p.maximum * 2 + 1 if p.type != "int" else int(p.maximum) + 1
    bad = [lo, hi, float("nan"), float("inf"), "1", True, None]
    if p.exclusive_minimum:
        bad.append(p.minimum)
    if p.exclusive_maximum:
        bad.append(p.maximum)
    if p.type == "int":
        bad.append(1.5)
    if p.type == "float_list":
        return [[b] for b in bad if b is not None] + [[], 3.0, "abc"]
    return bad


@pytest.mark.parametrize("kind", each_kind())
def test_every_parameter_is_range_checked_naming_it(kind: str) -> None:
    for p in registry.spec(kind).params:
        if p.name in example(kind) or p.name == "count":
            for bad in _bad_values(p):
                with pytest.raises(ValueError, match=p.name):
                    mechanism_from_dict(example(kind, **{p.name: bad}))


@pytest.mark.parametrize("kind", each_kind())
def test_defaults_match_the_declaration(kind: str) -> None:
    m = _example(kind)
    for f in dataclasses.fields(m):
        p = next(p for p in registry.spec(kind).params if p.name == f.name)
        if p.default is not REQUIRED and f.name not in example(kind):
            assert getattr(m, f.name) == p.default


@pytest.mark.parametrize("kind", each_kind(lambda spec: bool(spec.calibration)))
def test_calibration_directions_are_the_direction_of_cost(kind: str) -> None:
    """ "min" parameters (noise) cost less as they grow, "max" parameters cost more (from the
    first valid example that gives the parameter: Laplace's scale is in its other form)."""
    for parameter, direction in registry.spec(kind).calibration.items():
        data = next(wire for wire in valid(kind) if parameter in wire)
        base = data[parameter]
        grown = base * 2 if isinstance(base, float) else base + 3
        smaller = mechanism_from_dict(data).curve()
        larger = mechanism_from_dict({**data, parameter: grown}).curve()
        lo, hi = (larger, smaller) if direction == "min" else (smaller, larger)
        assert (lo.rdp <= hi.rdp).all() and lo.rho <= hi.rho, (kind, parameter)
        assert not np.array_equal(lo.rdp, hi.rdp)


def test_unknown_kind_lists_the_known_ones() -> None:
    with pytest.raises(ValueError, match="unknown mechanism 'nope'; known: approx_dp"):
        mechanism_from_dict({"mechanism": "nope"})
    with pytest.raises(ValueError, match="unknown mechanism None"):
        mechanism_from_dict({"sigma": 1.0})


def test_laplace_alternative_forms() -> None:
    spec = KINDS["laplace"]
    assert spec.one_of == (("epsilon",), ("scale", "sensitivity"))
    assert {p.name: p.required for p in spec.params} == {
        "epsilon": False,
        "scale": False,
        "sensitivity": False,
        "count": False,
    }
    by_scale = mechanism_from_dict({"mechanism": "laplace", "scale": 4.0, "sensitivity": 2.0})
    assert by_scale == mechanism_from_dict({"mechanism": "laplace", "epsilon": 0.5})
    for bad, message in [
        ({"epsilon": 0.5, "scale": 2.0}, "either epsilon or scale"),
        ({"epsilon": 0.5, "sensitivity": 2.0}, "scale \\+ sensitivity"),
        ({"scale": 0.0}, "scale must be in"),
        ({"scale": 1.0, "sensitivity": -1.0}, "sensitivity must be in"),
    ]:
        with pytest.raises(ValueError, match=message):
            mechanism_from_dict({"mechanism": "laplace", **bad})


def test_fields_added_later_are_written_only_when_set() -> None:
    plain = mechanism_from_dict(
        {"mechanism": "subsampled_gaussian", "sigma": 1.0, "sample_rate": 0.1, "steps": 1}
    )
    assert "sensitivity" not in plain.to_dict()
    clipped = mechanism_from_dict({**plain.to_dict(), "sigma": 3.0, "sensitivity": 3.0})
    assert clipped.to_dict()["sensitivity"] == 3.0
    assert clipped.curve().rdp.tolist() == plain.curve().rdp.tolist()  # same noise multiplier


def test_subsampled_gaussian_with_rate_one_is_the_gaussian() -> None:
    m = mechanism_from_dict(
        {"mechanism": "subsampled_gaussian", "sigma": 3.0, "sample_rate": 1.0, "steps": 7}
    )
    g = mechanism_from_dict({"mechanism": "gaussian", "sigma": 3.0, "count": 7})
    assert m.curve() == g.curve() and m.curve().gaussian_only
    with pytest.raises(ValueError, match="noise multiplier"):
        mechanism_from_dict(
            {"mechanism": "subsampled_gaussian", "sigma": 1e-5, "sample_rate": 0.5, "steps": 1}
        )


def test_repetitions_above_the_limit_are_refused() -> None:
    m = mechanism_from_dict(
        {"mechanism": "subsampled_gaussian", "sigma": 1.0, "sample_rate": 0.1, "steps": 10**9}
    )
    with pytest.raises(ValueError, match="repetitions"):
        m.repeated(2).curve()
    assert math.isfinite(m.curve().rdp[0])


def test_two_kinds_claiming_one_dp_event_type_are_refused_at_import() -> None:
    """The registry's event table is built at import by ``leaf_translators``: a second kind
    declaring a type another kind translates is a TypeError naming both (it took the type over
    silently, the later kind in alphabetical order winning)."""
    assert registry._LEAVES == registry.leaf_translators(KINDS.values())
    claims = dataclasses.replace(
        toy.SPEC, dp_events={"DiscreteLaplaceDpEvent": lambda event, translate: []}
    )
    with pytest.raises(TypeError, match="'discrete_laplace' and 'toy_geometric'.*DiscreteLaplace"):
        registry.leaf_translators([*KINDS.values(), claims])
    assert set(registry.leaf_translators([*KINDS.values(), toy.SPEC])) == set(registry._LEAVES)
