"""compose_many / compose_arrays: the same composition as entry by entry, never below the exact
sum, identical mechanisms grouped and each kind's distinct curves computed in one call."""

from __future__ import annotations

import copy
import math
import pickle
from fractions import Fraction

import numpy as np
import pytest

from app.accounting.compose import _groups, _is_affine, compose_arrays, compose_many
from app.accounting.curve import PrivacyCurve, compose
from app.accounting.kinds import KINDS
from app.accounting.kinds._spec import UnitCurves, Units, column, unit_curve
from app.accounting.registry import kind_names, mechanism_from_dict
from tests.kind_examples import each_kind, example

RNG = np.random.default_rng(5)


def _ledger() -> list:
    """Four parameter sets of every registered kind's typical example, each three times."""
    out = []
    for kind in kind_names():
        params = {k: v for k, v in example(kind).items() if k != "mechanism"}
        for j in range(4):
            p = dict(params)
            for name, value in params.items():
                if isinstance(value, float) and name not in ("delta", "sample_rate"):
                    p[name] = value * (1 + 0.1 * j)
            out.append(mechanism_from_dict({"mechanism": kind, **p, "count": j + 1}))
    return out * 3  # every parameter set three times


def _exact_sum(curves: list[PrivacyCurve], j: int) -> Fraction:
    return sum((Fraction(float(c.rdp[j])) for c in curves), Fraction(0))


def test_same_as_entry_by_entry_and_never_below_the_exact_sum() -> None:
    ledger = _ledger()
    many = compose_many(ledger)
    curves = [m.curve() for m in ledger]
    one_by_one = compose(curves)
    finite = np.isfinite(one_by_one.rdp)
    np.testing.assert_allclose(many.rdp[finite], one_by_one.rdp[finite], rtol=1e-12)
    assert (np.isinf(many.rdp) == ~finite).all()
    for j in range(0, many.rdp.size, 17):
        if finite[j]:
            assert Fraction(float(many.rdp[j])) >= _exact_sum(curves, j)
    assert many.delta == pytest.approx(one_by_one.delta, rel=1e-12)
    assert many.delta >= float(sum(Fraction(c.delta) for c in curves))
    assert many.gaussian_only is False and many.rho == math.inf  # the rdp kind has no rho


def test_gaussian_only_ledgers_stay_gaussian_only() -> None:
    ms = [mechanism_from_dict({"mechanism": "gaussian", "sigma": s}) for s in (1.0, 2.0, 3.0)]
    ms.append(
        mechanism_from_dict(
            {"mechanism": "subsampled_gaussian", "sigma": 2.0, "sample_rate": 1.0, "steps": 1}
        )
    )
    total = compose_many(ms)
    assert total.gaussian_only
    assert total.rho == pytest.approx(0.5 + 1 / 8 + 1 / 18 + 1 / 8, rel=1e-14)
    assert total.delta == 0.0 and total.pure_eps == math.inf  # sums of zeros stay exactly 0
    assert compose_many([]) == PrivacyCurve.zero()
    pure = compose_many([mechanism_from_dict({"mechanism": "laplace", "epsilon": 0.1})] * 3)
    assert pure.delta == 0.0 and pure.pure_eps >= 0.3


def test_identical_mechanisms_are_computed_once_per_kind(monkeypatch) -> None:
    calls: dict[str, int] = {}
    sg = KINDS["subsampled_gaussian"].mechanism
    original = sg.unit_curves.__func__  # type: ignore[attr-defined]

    def counting(cls, units):
        calls[cls.kind] = calls.get(cls.kind, 0) + len(units)
        return original(cls, units)

    monkeypatch.setattr(sg, "unit_curves", classmethod(counting))
    runs = [
        mechanism_from_dict(
            {
                "mechanism": "subsampled_gaussian",
                "sigma": 1.0 + (i % 5) / 10,
                "sample_rate": 0.01,
                "steps": 100 + i,
            }
        )
        for i in range(200)
    ]
    total = compose_many(runs)
    assert calls == {"subsampled_gaussian": 5}  # 200 runs, 5 distinct (sigma, q)
    np.testing.assert_allclose(total.rdp, compose([m.curve() for m in runs]).rdp, rtol=1e-12)


@pytest.mark.parametrize("kind", each_kind())
def test_batched_unit_curves_are_the_single_ones(kind: str) -> None:
    units = []
    for j in range(6):
        p = {
            k: (
                v * (1 + 0.37 * j)
                if isinstance(v, float) and k not in ("delta", "sample_rate")
                else v
            )
            for k, v in example(kind).items()
        }
        units.append(mechanism_from_dict(p).unit())
    batch = type(units[0]).unit_curves(units)
    for i, u in enumerate(units):
        single = unit_curve(u)
        np.testing.assert_array_equal(batch.rdp[i], single.rdp)
        assert batch.row(i) == single


def test_compose_arrays_of_stored_curves() -> None:
    curves = [m.curve() for m in _ledger()]
    stacked = UnitCurves.stack(curves)
    total = compose_arrays(stacked)
    finite = np.isfinite(total.rdp)
    np.testing.assert_allclose(total.rdp[finite], compose(curves).rdp[finite], rtol=1e-12)
    assert compose_arrays(UnitCurves.stack([])) == PrivacyCurve.zero()


def test_a_curve_that_overflows_is_a_value_error() -> None:
    huge = mechanism_from_dict({"mechanism": "zcdp", "rho": 1e6, "count": 10**9})
    total = compose_many([huge])  # 1e15 * 1e5 is still finite
    assert math.isfinite(total.rdp[-1])
    too_many = mechanism_from_dict(
        {
            "mechanism": "subsampled_gaussian",
            "sigma": 1.0,
            "sample_rate": 0.1,
            "steps": 10**9,
            "count": 2,
        }
    )
    with pytest.raises(ValueError, match="repetitions"):
        compose_many([too_many])


@pytest.mark.parametrize("kind", each_kind())
def test_grouped_units_keep_their_own_parameters(kind: str) -> None:
    """The columns ``_groups`` keeps (so that curves do not read the objects again) are the
    units' own parameters, and the weights add up to every repetition. Kinds affine in the
    order are not grouped: each entry is its own unit, weighted by its count."""
    ms = [m for m in _ledger() if m.kind == kind]
    units, weights = _groups(type(ms[0]), ms)
    distinct = {m.unit_key() for m in ms}  # each parameter set is in the ledger three times
    if _is_affine(type(ms[0])):
        assert list(units) == ms and list(weights) == [m.count for m in ms]
    else:
        assert len(units) == len(distinct) and {u.unit_key() for u in units} == distinct
    if isinstance(units, Units):  # scalar parameters: grouped by a sort, columns kept
        assert units.columns
        for name, kept in units.columns.items():
            read = np.array([float(getattr(u, name)) for u in units])
            np.testing.assert_array_equal(kept, read)
            np.testing.assert_array_equal(column(units, name), read)
    assert weights.sum() == sum(m.repetitions() for m in ms)


def test_a_chunk_of_units_keeps_its_columns() -> None:
    """``compose_many`` computes curves in chunks of ``units[k : k + COMPUTE_CHUNK]``: a slice
    keeps the columns (sliced alike), so a chunk's parameters are not read from the objects
    again. Here the columns differ from the objects' own values, to tell which is read."""
    ms = [mechanism_from_dict({"mechanism": "laplace", "epsilon": 0.1 * (i + 1)}) for i in range(5)]
    units = Units(ms, {"epsilon": np.array([1.0, 2.0, 3.0, 4.0, 5.0])})
    chunk = units[1:4]
    assert isinstance(chunk, Units) and list(chunk) == ms[1:4]
    np.testing.assert_array_equal(column(chunk, "epsilon"), [2.0, 3.0, 4.0])
    assert units[2] is ms[2] and units[-1] is ms[4]


def test_sorted_groups_are_np_uniques_groups() -> None:
    """``_sorted_groups`` (an unstable sort) finds np.unique's groups, in the same order, with
    one member of each as its representative."""
    from app.accounting.compose import _sorted_groups

    rng = np.random.default_rng(4)
    for values in (
        rng.integers(0, 50, 2_000).astype(np.float64),
        rng.uniform(0.0, 1.0, 3_000),
        np.array([0.0, -0.0, 1.0, 1.0]),
        np.array([]),
    ):
        first, inverse = _sorted_groups(values)
        unique, _, want_inverse = np.unique(values, return_index=True, return_inverse=True)
        np.testing.assert_array_equal(values[first], unique)
        np.testing.assert_array_equal(inverse, want_inverse.ravel())


def test_reading_columns_in_one_pass_gives_columns_values() -> None:
    from app.accounting.compose import _read_columns

    ms = [m for m in _ledger() if m.kind == "gaussian"]
    names = ["count", "sigma", "sensitivity"]
    read = _read_columns(ms, names)
    for j, name in enumerate(names):
        np.testing.assert_array_equal(read[:, j], column(ms, name))


def _chunk_sum(curves: UnitCurves, weights: np.ndarray) -> PrivacyCurve:
    """One chunk's weighted sum raised above the exact one, spelled out as compose_many
    computed it chunk by chunk (not through the module's own ``_chunk_sums``)."""
    from app.accounting import compose as c

    n = weights.size
    if n == 1 and weights[0] == 1.0:
        n = 0  # one curve taken once: exact, not raised
    with np.errstate(over="ignore"):
        rdp = c._dot(weights, curves.rdp)
        rho = float(c._dot(weights, curves.rho))
        pure = float(c._dot(weights, curves.pure_eps))
        delta = float(c._dot(weights, curves.delta))
    return PrivacyCurve(
        rho=float(c._raise(np.array(rho), n)),
        rdp=c._raise(rdp, n),
        pure_eps=float(c._raise(np.array(pure), n)),
        gaussian_only=bool(curves.gaussian_only.all()),
        delta=min(1.0, float(c._raise(np.array(delta), n))),
    )


def _compose_chunk_by_chunk(mechanisms: list) -> PrivacyCurve:
    """compose_many as it was before its chunk sums were folded in one call: every CHUNK of a
    kind's distinct curves summed (``_chunk_sum``) and added to the total by ``_add``."""
    from app.accounting import compose as c

    total = PrivacyCurve.zero()
    kinds = sorted({type(m) for m in mechanisms}, key=lambda cls: cls.kind)
    for cls in kinds:
        units, weights = c._groups(cls, [m for m in mechanisms if type(m) is cls])
        affine = cls._affine(units)
        if affine is not None:
            total = c._add(total, c._affine_sum(affine, weights))
            continue
        for k in range(0, len(units), c.COMPUTE_CHUNK):
            curves = cls.unit_curves(units[k : k + c.COMPUTE_CHUNK])
            for j in range(0, curves.rho.size, c.CHUNK):
                block = curves.rows(slice(j, j + c.CHUNK))
                w = weights[k + j : k + j + c.CHUNK]
                total = c._add(total, _chunk_sum(block, w))
    return total


def test_the_chunk_sums_fold_bit_for_bit_as_chunk_by_chunk() -> None:
    """Kinds in any mix, counts, deltas, infinite RDP tails (the rdp kind above its largest
    order), and more distinct curves than one compute chunk (2,500 Laplace, 700 DP-SGD-free
    exponential): the same total, bit for bit, as the chunk-by-chunk loop."""
    rng = np.random.default_rng(11)
    ledger = list(_ledger())
    ledger += [
        mechanism_from_dict({"mechanism": "laplace", "epsilon": float(e), "count": int(n)})
        for e, n in zip(rng.uniform(1e-4, 2.0, 2500), rng.integers(1, 5, 2500), strict=True)
    ]
    ledger += [
        mechanism_from_dict({"mechanism": "exponential", "epsilon": float(e)})
        for e in rng.uniform(1e-3, 3.0, 700)
    ]
    ledger += [
        mechanism_from_dict({"mechanism": "approx_dp", "epsilon": float(e), "delta": 1e-7})
        for e in rng.uniform(0.1, 1.0, 300)
    ]
    ledger += [
        mechanism_from_dict(
            {"mechanism": "rdp", "orders": [2.0, 8.0], "epsilons": [0.1 * (1 + i), 0.5 * (1 + i)]}
        )
        for i in range(200)
    ]
    order = rng.permutation(len(ledger))
    ledger = [ledger[i] for i in order]
    for part in (ledger, ledger[:130], ledger[:1]):
        got, want = compose_many(part), _compose_chunk_by_chunk(part)
        assert np.array_equal(got.rdp, want.rdp)
        assert np.isinf(got.rdp).any() == np.isinf(want.rdp).any()
        assert (got.rho, got.pure_eps, got.delta, got.gaussian_only) == (
            want.rho,
            want.pure_eps,
            want.delta,
            want.gaussian_only,
        )
    assert np.isinf(compose_many(ledger).rdp).any()  # the rdp entries' tails were in it


def test_slotted_mechanisms_copy_pickle_and_compare_as_before() -> None:
    """Mechanisms are slotted dataclasses (fields read without an instance dict, which makes a
    100,000-entry compose cheaper): each kind still copies, pickles, compares, hashes and takes
    a unit of one repetition."""
    for m in _ledger()[: len(kind_names()) * 4]:
        assert not hasattr(m, "__dict__")
        assert pickle.loads(pickle.dumps(m)) == m and hash(copy.copy(m)) == hash(m)
        unit = m.unit()
        assert unit.count == 1 and unit.unit_key() == m.unit_key()
        assert unit.curve() == m.unit().curve()


def test_compose_sequence_is_the_one_by_one_fold_bit_for_bit() -> None:
    """What a compose request answers equals what a dataset's running total of the same
    charges holds (``Mechanism.curve()`` added in order), for every kind, counts and repeated
    parameter sets included."""
    from app.accounting.compose import compose_sequence
    from app.accounting.kinds import KINDS
    from tests.kind_examples import valid

    rng = np.random.default_rng(3)
    ledger = [mechanism_from_dict(e) for kind in sorted(KINDS) for e in valid(kind)]
    ledger += [
        mechanism_from_dict(
            {"mechanism": "randomized_response", "epsilon": float(e), "k": 9, "count": int(c)}
        )
        for e, c in zip(rng.uniform(0.1, 3.0, 40), rng.integers(1, 4, 40), strict=True)
    ]
    ledger += ledger[:7]  # repeated parameter sets
    want = PrivacyCurve.zero()
    for m in ledger:
        want = want + m.curve()
    got = compose_sequence(ledger)
    assert np.array_equal(got.rdp, want.rdp)
    assert (got.rho, got.pure_eps, got.delta, got.gaussian_only) == (
        want.rho,
        want.pure_eps,
        want.delta,
        want.gaussian_only,
    )
