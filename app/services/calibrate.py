"""``GET /calibrate``: the least noise / largest epsilon / most steps that still fits."""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import replace
from typing import Any

import numpy as np

from app import responses as r
from app.accounting import registry
from app.accounting.calibration import (
    PARAMETERS,
    AllFit,
    Calibration,
    Fits,
    calibrate,
    cheapest,
    costly_end,
    default_parameter,
    envelope,
    fits_under,
    further,
    refused_input,
)
from app.accounting.curve import PrivacyCurve
from app.accounting.filters import Budget, Filter
from app.accounting.pld import PldWork, PldWorkExceeded
from app.accounting.pld_filter import PldFilter, with_new_entry
from app.db.engine import Database
from app.errors import BudgetExceeded, Forbidden, Unprocessable
from app.principal import Caller
from app.services import admission, answers, refusals, state
from app.services.auth import authenticated
from app.services.state import DatasetState


def _required(kind: str) -> set[str]:
    """The fields of ``kind`` that have no default."""
    return {p.name for p in registry.spec(kind).params if p.required}


def _with_holds(committed: PrivacyCurve, held: PrivacyCurve | None) -> PrivacyCurve:
    return committed if held is None else committed + held


PLD_EVALUATIONS = 10
"""Most PLD admissions one calibration on a ``pld`` dataset tries beyond the curve rule's
answer (each: one construction, one or two compositions with the stored distribution)."""

PLD_WORK = 5_000_000
"""Work (``PldWork`` units, about 65 ns of CPU each) the PLD search of one calibration may spend
beyond the curve rule's answer's own distribution: every candidate's construction as
``pld_mechanisms`` prices it (a discrete Laplace's is linear in its sensitivity: 7 million
units, 0.44 s, at 10^6) and its compositions with the stored distribution, each counted before
it runs. When the next would pass it, the search stops and answers the best admitted candidate
found, as after ``PLD_EVALUATIONS`` checks (ten discrete Laplace candidates at sensitivity 10^6
took 4.6 s when only grid points were counted, after they were built). With the answer's own
distribution the whole calibration stays within ``PLD_WORK_LIMIT``."""

PLD_MAX_COUNT = 1_000
"""Repetitions above which the PLD is not searched: a candidate's construction composes it
``count`` times (log2(count) convolutions, about 2 s of CPU each at 10^6). Not for a Gaussian,
whose repetitions are one Gaussian (``pld_mechanisms.gaussian``)."""


def _answer_mechanism(
    kind: str, fixed: dict[str, Any], parameter: str, value: float, m: Any
) -> dict[str, Any]:
    """The mechanism object an answer carries (what the pipeline will charge): the mechanism's
    own, but a Laplace calibrated by ``scale`` is in the scale form asked for, so that it holds
    the value solved for (sensitivity 1 unless given; the epsilon form had no ``scale``)."""
    if kind == "laplace" and parameter == "scale":
        return {
            "mechanism": "laplace",
            "scale": value,
            "sensitivity": fixed.get("sensitivity", 1.0),
            "count": m.count,
        }
    out: dict[str, Any] = m.to_dict()
    return out


def _pld_admits(
    st: DatasetState, kind: str, fixed: dict[str, Any], parameter: str, search: PldWork
) -> Callable[[Any, float], bool | None]:
    """The admission check a charge of ``kind`` with ``parameter`` = value meets on a ``pld``
    dataset (``PldFilter.admits``, as ``admission.decide``), as a predicate of (mechanism,
    value): None once ``search`` (the search's meter: constructions and compositions, priced
    before they run) is spent."""
    committed = st.pld
    assert committed is not None

    def admits(m: Any, value: float) -> bool | None:
        wire = _answer_mechanism(kind, fixed, parameter, value, m)
        try:
            ask = admission.Ask.of(m, wire)
            new = admission.entry_pld(st, ask.wire, search)
            # the compositions admission runs: with the ledger, then with the holds
            search.charge(committed.composition_work(new))
            if st.pld_held is not None:
                search.charge(committed.composition_work(new) + st.pld_held.size)
        except (admission.PldWorkRefused, PldWorkExceeded):
            return None  # the work is spent: the best admitted candidate so far stands
        except (Unprocessable, ValueError):
            return False
        return PldFilter(st.filter).admits(
            (committed, st.committed),
            (st.pld_held, st.held_curve),
            (new, ask.curve),
            st.held.count + 1,
        )

    return admits


def _searched_by_pld(kind: str, start: Calibration) -> bool:
    """Whether a calibration of ``kind`` from ``start`` is searched on the PLD at all: not
    DP-SGD (a candidate's construction is up to seconds), nor more than ``PLD_MAX_COUNT``
    repetitions, but for a Gaussian: its repetitions are one Gaussian of sensitivity x
    sqrt(count), built at the cost of one run (count 1,001 answered 7.8 % more noise than
    dp_accounting's PLD needs, where count 1,000 was within 0.01 %)."""
    if kind == "subsampled_gaussian":
        return False
    return kind == "gaussian" or start.mechanism.count <= PLD_MAX_COUNT


def _search_meter(work: PldWork) -> PldWork:
    """The PLD search's share of the request's meter: ``PLD_WORK`` more, within its limit."""
    search = PldWork(min(work.limit, work.spent + PLD_WORK))
    search.spent = work.spent
    return search


def _further_by_pld(
    st: DatasetState,
    kind: str,
    fixed: dict[str, Any],
    result: Calibration,
    work: PldWork,
    *,
    from_cheapest: bool = False,
) -> Calibration:
    """On a ``pld`` dataset, which admits by its PLD or by its curve rule: the curve rule's
    answer (or, ``from_cheapest``, the least costly invocation, which the PLD admits where the
    curve rule admits nothing) moved as far as the PLD admits, in at most ``PLD_EVALUATIONS``
    admission checks and ``PLD_WORK`` units of counted work (``work``, the request's meter:
    constructions and compositions, priced before they run), each check the one a charge of
    that mechanism meets (``_pld_admits``). Not for DP-SGD or more than ``PLD_MAX_COUNT``
    repetitions (``_searched_by_pld``), or a Gaussian on a Gaussian ledger with Gaussian holds
    (its curve rule is the exact conversion already; one non-Gaussian hold makes it a bound,
    which answered 7.8 % more noise than the PLD needs). From the least costly invocation, the
    steps after a guess that fits start small (the jump from there spans many decades)."""
    if (
        st.pld is None
        or not _searched_by_pld(kind, result)
        or (
            result.curve.gaussian_only and _with_holds(st.committed, st.held_curve).gaussian_only
        )  # exact already
    ):
        return result

    search = _search_meter(work)
    admits = _pld_admits(st, kind, fixed, result.parameter, search)
    after: float | None
    if kind == "gaussian" and result.parameter == "sigma":
        guess, after = _gaussian_guess(st, fixed, result, search), GUESS_MARGIN
    else:
        guess, after = _guess(st, kind, fixed, result, search), None
        if from_cheapest:
            after = FIRST_STEP
    try:
        return further(kind, fixed, result, admits, PLD_EVALUATIONS, guess, after_guess=after)
    finally:
        work.spent = search.spent


FIRST_STEP = 0.01
"""The first step (in log of the parameter) after a guess that fits, in a PLD search from the
least costly invocation (``extend``'s own first step): the jump to the guess from there is tens
of nats, and stepping on by it, then bisecting, left answers about 10 % short of the edge."""


def _cheapest_by_pld(
    st: DatasetState, kind: str, fixed: dict[str, Any], parameter: str, work: PldWork
) -> Calibration | None:
    """On a ``pld`` dataset whose curve rule admits no value at all (its RDP bound of the
    ledger at or past the budget, where the PLD's is below it), the least costly invocation
    (``cheapest``) if the PLD admits it, its distribution built on the request's meter (422 if
    it alone is past the limit, as its charge would be); None otherwise, or where the PLD is
    not searched (``_searched_by_pld``)."""
    least = cheapest(kind, fixed, parameter)
    if st.pld is None or least is None or not _searched_by_pld(kind, least):
        return None
    wire = _answer_mechanism(kind, fixed, parameter, least.value, least.mechanism)
    admission.entry_pld(st, wire, work)
    search = _search_meter(work)
    try:
        admitted = _pld_admits(st, kind, fixed, parameter, search)(least.mechanism, least.value)
    finally:
        work.spent = search.spent
    return least if admitted else None


def _pld_epsilon_with(
    st: DatasetState, kind: str, fixed: dict[str, Any], result: Calibration, work: PldWork
) -> float:
    """The PLD's epsilon at the budget delta of the ledger (active holds included) with
    ``result``'s answer charged: one construction and composition, charged to ``work``
    (``PldWorkRefused`` / ``PldWorkExceeded`` past it). ``st.pld`` is set."""
    assert st.pld is not None
    wire = _answer_mechanism(kind, fixed, result.parameter, result.value, result.mechanism)
    new = admission.entry_pld(st, wire, work)
    work.charge(st.pld.composition_work(new))
    _, everything = with_new_entry(st.pld, st.pld_held, new)
    epsilon: float = everything.epsilon(st.budget.delta)
    return epsilon


GUESS_MARGIN = 2e-3
"""How far inside the PLD's edge ``_gaussian_guess`` aims (relative, in epsilon), and the step
(in log sigma) tried after it when it fits."""


def _gaussian_guess(
    st: DatasetState, fixed: dict[str, Any], result: Calibration, work: PldWork
) -> float | None:
    """Where the PLD search of a Gaussian's sigma tries first: kappa = eps_PLD / eps_B, the
    ledger's PLD epsilon with the curve rule's answer charged over the budget's epsilon (the
    rule's edge), taken as constant near the answer, so the PLD reaches eps_B about where the
    curve rule reaches eps_B / kappa: the curve rule's answer for a budget of
    eps_B (1 - GUESS_MARGIN) / kappa. On five ledgers of a Laplace and a Gaussian (eps_B 0.5-10)
    that lands within 0.35 % of the PLD's least sigma, where stepping from the rule's answer
    (1 %, 2 %, 4 %, ..., two candidates within the work) stopped 4 % above it. One more
    construction and composition, and a curve search; a first try only: the admission checks
    decide. None where the PLD leaves no room or the rule cannot be set for that budget."""
    if st.pld is None:
        return None
    try:
        eps_pld = _pld_epsilon_with(st, "gaussian", fixed, result, work)
    except (Unprocessable, ValueError):
        return None
    budget = st.budget
    kappa = eps_pld / budget.epsilon
    if not 0.0 < kappa < 1.0:
        return None
    target = budget.epsilon * (1.0 - GUESS_MARGIN) / kappa
    try:
        rule = Filter.create(
            st.filter.kind,
            Budget(target, budget.delta),
            st.allowed_mechanisms,
            entry_delta=st.filter.entry_delta,
        )
        found = calibrate(
            "gaussian",
            fixed,
            "sigma",
            fits_under(rule, _with_holds(st.committed, st.held_curve), st.held.count),
        )
    except ValueError:
        return None
    return None if found is None else found.value


def _guess(
    st: DatasetState, kind: str, fixed: dict[str, Any], result: Calibration, work: PldWork
) -> float | None:
    """Where the PLD search tries first, for the epsilon of an epsilon-DP kind (or a Laplace
    scale): the answer's epsilon plus the room the PLD leaves with it, eps_B - eps_PLD, per
    repetition (the ledger's epsilon grows by about the entry's own increase). A first try only:
    the admission checks decide. One more construction and composition, and an epsilon search;
    None where the PLD leaves no room, or no work for it is left."""
    if (
        st.pld is None
        or result.parameter not in ("epsilon", "scale")
        or not registry.spec(kind).pure_calibration
    ):
        return None
    try:
        room = st.budget.epsilon - _pld_epsilon_with(st, kind, fixed, result, work)
    except (admission.PldWorkRefused, PldWorkExceeded):
        return None
    if not room > 0:
        return None
    if result.parameter == "scale":
        sensitivity = float(fixed.get("sensitivity", 1.0))
        return sensitivity / (sensitivity / result.value + room / result.mechanism.count)
    return result.value + room / result.mechanism.count


MOST_BINDING_BLOCKS = 16
"""Most blocks of one budget searched each as a limit of its own (those no other block of the
range dominates); beyond that their envelope, refined by ``STRUCTURE_EVALUATIONS`` admission
checks."""

STRUCTURE_EVALUATIONS = 16
"""Most admission checks (each a charge's dry run: one filter check per block of the range) by
which an answer searched on the blocks' envelope is moved on toward what admission takes."""


Held = tuple[PrivacyCurve, int]
"""A block as admission sees it: its committed curve with its active holds, and their count."""


def _binding(blocks: list[Held]) -> list[Held] | None:
    """The blocks no other one dominates (one of each equal set): a new curve fits on every
    block iff it fits on each of these. Block ``a`` dominates ``b`` when it is at least ``b``
    everywhere a filter looks (every order, rho, pure epsilon, the entries' own deltas, the
    count of holds; and Gaussian-only only if ``b`` is, as the exact Gaussian conversion and
    the gdp filter need it): every filter is monotone in these, so a new curve that fits on
    top of ``a`` fits on top of ``b``. None once more than ``MOST_BINDING_BLOCKS`` remain. One
    row of numbers per block, compared with at most that many kept rows at once."""
    rows = np.array(
        [
            np.concatenate(
                (c.rdp, (c.rho, c.pure_eps, c.delta, float(h), 0.0 if c.gaussian_only else 1.0))
            )
            for c, h in blocks
        ]
    )
    most = np.flatnonzero((rows >= rows.max(axis=0)).all(axis=1))
    if most.size:  # one block is the largest everywhere: the usual case
        return [blocks[int(most[0])]]
    kept: list[int] = []
    for i, row in enumerate(rows):
        if kept and bool((rows[kept] >= row).all(axis=1).any()):
            continue
        if kept:
            beaten = (row >= rows[kept]).all(axis=1)
            kept = [k for k, b in zip(kept, beaten, strict=True) if not b]
        kept.append(i)
        if len(kept) > MOST_BINDING_BLOCKS:
            return None
    return [blocks[i] for i in kept]


def _structure_fits(st: DatasetState, ask: admission.Ask) -> tuple[Fits, bool]:
    """The limits a charge with ``ask``'s allocation and blocks must fit, as admission checks
    them (``admission.decide_structures``): the dataset's budget (on a partitioned dataset its
    lifetime budget, if any), each block's budget, the allocation's (per block on a
    partitioned dataset); and whether they are exact. Of the blocks of one budget only those
    no other block dominates count, each a limit (``_binding``): usually one, the busiest
    block. The blocks' envelope (the pointwise largest of their curves, active holds included)
    answered 34 % less epsilon than admission takes beside a block that no other dominates (a
    Gaussian on one day, a Laplace on the next: the envelope has the Gaussian's orders and no
    pure-DP bound), and 409 on the default filter. Beyond ``MOST_BINDING_BLOCKS`` such blocks,
    their envelope still (errs toward more noise: not exact)."""
    t = ask.target
    fits = []
    exact = True
    holds = st.held.count
    if st.partition_unit is None:
        fits.append(fits_under(st.filter, _with_holds(st.committed, st.held_curve), holds))
    elif st.lifetime is not None:
        fits.append(fits_under(st.lifetime, _with_holds(st.committed, st.held_curve), holds))
    if t is not None:
        for group in (t.blocks, t.allocation_blocks):
            if group:
                blocks = [(_with_holds(b.committed, b.held.total()), b.held.count) for b in group]
                binding = _binding(blocks)
                if binding is None:
                    most = max(h for _, h in blocks)
                    fits.append(fits_under(group[0].filter, envelope([c for c, _ in blocks]), most))
                    exact = False
                else:
                    fits.extend(fits_under(group[0].filter, c, h) for c, h in binding)
        a = t.allocation
        if a is not None and st.partition_unit is None:
            fits.append(
                fits_under(a.filter, _with_holds(a.committed, a.held.total()), a.held.count)
            )
    return (fits[0] if len(fits) == 1 else AllFit(tuple(fits))), exact


def _further_by_admission(
    st: DatasetState,
    ask: admission.Ask,
    kind: str,
    fixed: dict[str, Any],
    parameter: str,
    result: Calibration | None,
) -> Calibration | None:
    """An answer searched on the blocks' envelope (more than ``MOST_BINDING_BLOCKS`` blocks no
    other dominates), moved on as far as the admission a charge meets confirms: one step of
    1 % (refused: the answer stands, within 1 % of admission's edge), then at most
    ``STRUCTURE_EVALUATIONS`` checks; where the envelope fitted nothing, from the least costly
    invocation if admission takes it, with a bisection of the range. Not for DP-SGD steps (an
    integer)."""
    if parameter == "steps":
        return result

    def admits(m: Any, value: float) -> bool:
        wire = _answer_mechanism(kind, fixed, parameter, value, m)
        try:
            curve = m.curve()
        except ValueError:
            return False
        tried = replace(ask, kind=kind, count=m.count, wire=wire, curve=curve)
        return admission.decide(st, tried).admitted

    guess = None
    if result is None:
        least = cheapest(kind, fixed, parameter)
        if least is None or not admits(least.mechanism, least.value):
            return None
        # from there, the costly end of the range first: then a bisection (in log space) of
        # the whole range, to within about 0.1 % in the checks given
        result, guess = least, costly_end(kind, parameter)
    else:  # one step of 1 % first: where admission refuses it, the answer is within 1 %
        moved = further(kind, fixed, result, admits, 1)
        if moved is result:
            return result
        result = moved
    return further(kind, fixed, result, admits, STRUCTURE_EVALUATIONS, guess)


def _nothing_fits(
    st: DatasetState, ask: admission.Ask, kind: str, fixed: dict[str, Any], parameter: str
) -> BudgetExceeded:
    """The 409 when no value fits: the problem a charge of the least costly invocation the
    search tried gets (``refusals.refusal``: spent, budget, requested, would_spend and, with
    budget structures, the ``limit`` that refused it), its detail behind calibrate's own.
    Where admission would take that invocation after all (the search errs toward refusing: a
    ``pld`` dataset's RDP bound), the dataset's spent and budget."""
    head = f"no value of {parameter} in the allowed range fits the remaining budget of {st.name!r}"
    least = cheapest(kind, fixed, parameter)
    if least is not None:
        wire = _answer_mechanism(kind, fixed, parameter, least.value, least.mechanism)
        tried = replace(ask, kind=kind, count=least.mechanism.count, wire=wire, curve=least.curve)
        dry = admission.decide(st, tried)
        if not dry.admitted:
            problem = refusals.refusal(st, tried, dry)
            extra = {k: v for k, v in problem.extra.items() if k != "dry_run"}
            value = int(least.value) if parameter == "steps" else least.value
            return BudgetExceeded(
                f"{head}; even the least costly, {parameter} = {value:.6g}, is {problem.detail}",
                **extra,
            )
    hint = (
        " by its RDP bound, which the search uses; its PLD is tighter and may still admit "
        "a charge (ask with dry_run=true)"
        if st.is_pld
        else ""
    )
    lifetime = answers.lifetime_budget(st)
    return BudgetExceeded(
        head + hint,
        dataset_id=st.id,
        spent=answers.spent(st).model_dump(mode="json"),
        budget=answers.budget(st).model_dump(mode="json"),
        **({"lifetime_budget": lifetime.model_dump(mode="json")} if lifetime else {}),
    )


def calibrate_next(
    db: Database,
    caller: Caller,
    ref: str,
    kind: str,
    parameter: str | None,
    fixed: dict[str, Any],
    allocation: str | None = None,
    blocks: tuple[str, str] | None = None,
    unread: Collection[str] = (),
) -> r.Calibration:
    """Calibrate the next invocation of ``kind`` against the dataset's remaining budget
    (active reservations count as spent), under the dataset's filter; with an ``allocation``
    and (on a partitioned dataset, required) the ``blocks`` the invocation reads, against
    every limit a charge with them must fit. A key limited to allocations that names none of
    them is refused (403) as its charge would be.

    ``fixed``: the other parameters of the invocation. Each is checked to be one the answer
    holds (``refused_input``): the parameter solved for, a field ``kind`` does not have or one
    of another form of its mechanism object is a 422 naming it, as is each of ``unread``
    (query parameters the route does not read: ``epsilon``, ``scale``, ``rho``, a typo), which
    were dropped before.

    A ``pld`` dataset admits by its PLD or by its curve rule (``pld_filter``): the search runs
    on the curve rule (fast), so its answer is admitted, then moves on as far as the PLD admits
    in a bounded number of checks (``_further_by_pld``)."""
    parameter = parameter or default_parameter(kind)
    if parameter not in PARAMETERS[kind]:
        raise Unprocessable(
            f"{kind}: can calibrate {', '.join(sorted(PARAMETERS[kind]))}, not {parameter!r}"
        )
    # nothing given is dropped: the parameter solved for, a field the kind does not have, one
    # of another form of the mechanism, or a query parameter the route does not read
    for name in sorted({*fixed, *unread}):
        refused = refused_input(kind, parameter, name)
        if refused is None and name in unread:  # a field the route has no query parameter for
            refused = f"{name!r} cannot be given to calibrate"
        if refused is not None:
            raise Unprocessable(refused)
    fixed = dict(fixed)
    missing = sorted(_required(kind) - set(fixed) - {parameter})
    if missing:
        raise Unprocessable(
            f"calibrating {kind} {parameter} needs {', '.join(missing)} "
            f"(query parameter{'s' if len(missing) > 1 else ''})"
        )
    for p in registry.spec(kind).params:  # an integer field (sensitivity) given as 2.0: 2
        if p.type == "int" and p.name in fixed:
            given = fixed[p.name]
            if float(given) != int(given):
                raise Unprocessable(f"{kind} {p.name} must be an integer, got {given}")
            fixed[p.name] = int(given)
    with db.read() as s:
        principal = authenticated(db, caller, s)
        if (why := principal.may_charge(allocation)) is not None:  # the 403 a charge gets
            raise Forbidden(why)
        st = state.load(s, ref, principal)
        admission.check_not_archived(st)  # nothing fits: the 409 a charge gets
        if st.is_pld:
            state.load_pld(s, st)
        # the limits a charge with this allocation and these blocks would meet (without
        # either, on a dataset that is not partitioned: its own budget alone, no read)
        ask = admission.Ask(kind, 1, {}, PrivacyCurve.zero(), allocation=allocation, blocks=blocks)
        prepared = admission.prepare(s, st, ask)
        fits, exact = _structure_fits(st, prepared)
    if st.allowed_mechanisms is not None and kind not in st.allowed_mechanisms:
        raise Unprocessable(f"mechanism {kind!r} is not allowed on dataset {st.name!r}")
    own_delta = float(fixed.get("delta", 0.0))
    admission.check_entry_deltas(st, kind, own_delta)
    if prepared.target is not None:  # (prepare checked a zero curve: the delta is asked here)
        admission.check_allocation_entry_delta(st, kind, own_delta, prepared.target.allocation)
    f = st.filter
    try:
        result = calibrate(kind, fixed, parameter, fits)
    except ValueError as exc:
        raise Unprocessable(str(exc)) from None
    work = admission.request_work()
    if result is not None and st.pld is not None:
        # the curve rule's answer's own distribution first, on the request's meter: a 422 (as
        # its charge would get) when it alone is past the limit; then the search, on what is left
        answer = _answer_mechanism(kind, fixed, parameter, result.value, result.mechanism)
        admission.entry_pld(st, answer, work)
        result = _further_by_pld(st, kind, fixed, result, work)
    elif result is None and st.pld is not None:
        # the curve rule fits nothing, but the PLD, the tighter bound, may: from the least
        # costly invocation when the PLD admits it (it answered 409 with 6 % of the budget left)
        least = _cheapest_by_pld(st, kind, fixed, parameter, work)
        if least is not None:
            result = _further_by_pld(st, kind, fixed, least, work, from_cheapest=True)
    if not exact:
        result = _further_by_admission(st, prepared, kind, fixed, parameter, result)
    if result is None:
        raise _nothing_fits(st, prepared, kind, fixed, parameter)
    value: float | int = int(result.value) if parameter == "steps" else result.value
    mechanism = _answer_mechanism(kind, fixed, parameter, result.value, result.mechanism)
    after = st.committed + result.curve
    # the spend the charge would report (a pld dataset: its PLD's or its curve's, the least)
    if st.pld is not None:  # built above, within the request's work (a cache hit)
        _, spent_after = admission.pld_after(st, mechanism, after)
    else:
        spent_after = admission.totals_filter_spend(st, after)
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
        spent_after=answers.spent(st, after, spent_after),
        filter=f.kind.value,
    )


__all__ = ["calibrate_next"]
