"""The charge: authenticate the caller, then, under the dataset's lock (grouped with the
concurrent writes on the same dataset, ``admission.run_locked``), dry-run the new curve through
its filter (active reservations counted as spent) and either append a ledger entry or record a
rejection. Retries with the same Idempotency-Key return the first answer (``idempotency``).
"""

from __future__ import annotations

import functools
from typing import Any

from sqlalchemy.orm import Session

from app import observability
from app import responses as r
from app.accounting import dp_events, pld_mechanisms
from app.accounting.kinds.subsampled_gaussian import too_many_runs
from app.accounting.mechanisms import Mechanism
from app.accounting.pld import Pld
from app.accounting.pld_filter import PldFilter
from app.db.engine import Database
from app.errors import BudgetExceeded, Forbidden, Unprocessable
from app.principal import Caller
from app.services import admission, answers, idempotency, refusals, verification
from app.services.auth import authenticated
from app.services.state import DatasetState
from app.services.tallies import fill_next_expiry

SCOPE = "charge"


def charge(
    db: Database,
    caller: Caller,
    ref: str,
    *,
    mechanism: Mechanism,
    wire: dict[str, Any],
    label: str | None = None,
    metadata: dict[str, Any] | None = None,
    idempotency_key: str | None = None,
    dry_run: bool = False,
    allocation: str | None = None,
    blocks: tuple[str, str] | None = None,
) -> r.Charge | r.DryRun:
    """Charge ``mechanism`` to dataset ``ref``: the new entry and the spend after it, or
    ``BudgetExceeded`` (409) after recording the rejection. With ``dry_run`` the answer says it
    would be admitted (or 409) and nothing is recorded. A replayed Idempotency-Key returns the
    stored first answer (or raises the stored refusal).
    """
    principal = authenticated(db, caller)
    if (why := principal.may_charge(allocation)) is not None:
        raise Forbidden(why)
    asked = admission.Ask.of(
        mechanism, wire, label, metadata, principal, allocation=allocation, blocks=blocks
    )
    request: dict[str, Any] = {"mechanism": wire, "label": label, "metadata": metadata}
    if allocation is not None or blocks is not None:  # budget structures
        request["allocation"], request["blocks"] = allocation, blocks
    # only a request sent with an Idempotency-Key is remembered (or replayed) by its hash
    req_hash = idempotency.request_hash(request) if idempotency_key is not None else ""

    def work(s: Session, st: DatasetState) -> r.Charge | r.DryRun | BudgetExceeded:
        if idempotency_key is not None and not dry_run:
            first = idempotency.replay(s, st.id, SCOPE, idempotency_key, req_hash, principal.key_id)
            if first is not None:
                return idempotency.replayed(r.Charge, first)
        verification.check_formulas_current(s, db)
        admission.check_not_archived(st)
        admission.check_allowed(st, asked.kind)
        admission.check_admissible(st, asked.kind, asked.curve)
        ask = admission.prepare(s, st, asked)
        dry = admission.decide(st, ask)
        if dry.admitted and ask.target is not None:  # the answer's views: reserved.next_expiry
            fill_next_expiry(s, st.id, ask.target.tallies())
        if dry_run:
            if not dry.admitted:
                raise refusals.refusal(st, ask, dry, dry_run=True)
            return r.DryRun(
                admitted=True,
                dry_run=True,
                spent=answers.spent(st),
                would_spend=answers.spent(st, dry.after, dry.spend_after),
                requested=answers.requested(st, wire, ask.curve),
                **answers.structures_after(ask.target, dry.checks, st.id),
            )
        outcome: r.Charge | BudgetExceeded
        if dry.admitted:
            entry = admission.append(
                s, st, ask, dry.after, dry.spend_after, pld_after=dry.pld_after, checks=dry.checks
            )
            outcome = r.Charge(
                entry=entry, spent=answers.spent(st), **answers.structures(ask.target, st.id)
            )
        else:
            outcome = refusals.refuse(s, st, ask, dry, "charge")
        admitted = isinstance(outcome, r.Charge)
        observability.count(
            s,
            observability.CHARGES,
            dataset=st.id,
            mechanism=ask.kind,
            outcome="admitted" if admitted else "refused",
        )
        if not admitted and dry.limits:
            observability.count(
                s, observability.STRUCTURE_REFUSALS, dataset=st.id, limit=dry.limits[0]
            )
        if idempotency_key is not None:
            status, body = (
                (201, outcome.model_dump(mode="json"))
                if isinstance(outcome, r.Charge)
                else (409, outcome.to_problem())
            )
            idempotency.remember(
                s, st.id, SCOPE, idempotency_key, req_hash, status, body, principal.key_id
            )
        return outcome

    admission.warm_pld(ref, [wire])  # a pld construction outside the lock
    outcome = admission.run_locked(db, ref, principal, work)
    if isinstance(outcome, BudgetExceeded):
        raise outcome  # the rejection is committed
    return outcome


# --- a dp_accounting event: several mechanisms, admitted together ----------------------------

DP_EVENT_SCOPE = "charge_dp_event"
MAX_EVENT_PARTS = 1000
"""At most this many distinct mechanisms in one event (identical ones are merged first)."""


merged = dp_events.merged

EACH_MECHANISM = (
    "charge each mechanism the event translates to with POST /v1/datasets/{id}/charges "
    "(GET /v1/mechanisms lists the event types each kind translates)"
)
"""What a caller whose dp_event charge needs an allocation or blocks can do instead."""


def translate_dp_event(event: dict[str, Any]) -> list[Mechanism]:
    """The mechanisms of a dp_accounting event (``app.accounting.dp_events``; 422 naming what
    has no translation, with the problem's ``event_path`` saying where in the event it is)."""
    try:
        mechanisms = dp_events.translate(event)
    except ValueError as exc:
        path = getattr(exc, "path", "")
        raise Unprocessable(f"dp_event: {exc}", **({"event_path": path} if path else {})) from None
    if not mechanisms:
        raise Unprocessable(
            "dp_event: the event charges nothing (every part of it is a NoOpDpEvent, a "
            "SelfComposedDpEvent of count 0, a PoissonSampledDpEvent of sampling_probability 0 "
            "or a RandomizedResponseDpEvent of noise_parameter 1, none of which has a privacy "
            "cost)"
        )
    if len(mechanisms) > MAX_EVENT_PARTS:
        raise Unprocessable(
            f"dp_event: {len(mechanisms)} distinct mechanisms, at most {MAX_EVENT_PARTS}"
        )
    if (why := too_many_runs(mechanisms)) is not None:
        raise Unprocessable(f"dp_event: {why}")
    return mechanisms


def _whole(st: DatasetState, asks: list[admission.Ask], whole: admission.Ask) -> admission.Decision:
    """Would all ``asks`` fit together? One dry run of their composition."""
    if not st.is_pld:
        # the parts are appended one by one, and holds may commit in any order
        dry = st.filter.dry_run(st.committed, st.held_curve, whole.curve, st.held.count + len(asks))
        return admission.Decision(dry.admitted, dry.after, dry.spend_after)
    assert st.pld is not None
    work = admission.request_work()  # one meter for all the parts
    new = functools.reduce(Pld.compose, [admission.entry_pld(st, a.wire, work) for a in asks])
    p = PldFilter(st.filter).dry_run(
        (st.pld, st.committed),
        (st.pld_held, st.held_curve),
        (new, whole.curve),
        st.held.count + len(asks),
    )
    return admission.Decision(p.admitted, p.after_curve, p.spend_after, new, p.after)


def _append(s: Session, st: DatasetState, ask: admission.Ask) -> r.Entry:
    """Append one ask of an admitted batch (its own spend after it, for the entry's record)."""
    if not st.is_pld:
        dry = st.filter.dry_run(st.committed, None, ask.curve)
        return admission.append(s, st, ask, dry.after, dry.spend_after)
    after = st.committed + ask.curve  # the batch is admitted already: no second check
    state, spend_after = admission.pld_after(st, ask.wire, after)
    return admission.append(s, st, ask, after, spend_after, pld_after=state)


def charge_dp_event(
    db: Database,
    caller: Caller,
    ref: str,
    *,
    event: dict[str, Any],
    label: str | None = None,
    metadata: dict[str, Any] | None = None,
    idempotency_key: str | None = None,
    dry_run: bool = False,
) -> r.ChargeBatch | r.DryRun:
    """Charge the mechanisms a dp_accounting event translates to, all or none: admitted iff
    their composition fits (for the curve filters, every prefix then fits too, as curves only
    grow; a ``pld`` dataset checks the composed distribution), then one entry each, in one
    transaction under the dataset's lock. A refusal is one rejection recording the event.
    It names no allocation or blocks: a key limited to allocations is refused (403), and so is
    a partitioned dataset (422), each saying to charge the event's mechanisms one by one (the
    plain charge's refusals asked for an 'allocation' or 'blocks' this body cannot hold)."""
    principal = authenticated(db, caller)
    if principal.may_charge(None) is not None:
        raise Forbidden(
            f"this key is limited to allocations {list(principal.allocations or ())}, and a "
            f"dp_event charge names no allocation: {EACH_MECHANISM}, naming one in 'allocation'"
        )
    mechanisms = translate_dp_event(event)
    asks = [admission.Ask.of(m, m.to_dict(), label, metadata, principal) for m in mechanisms]
    total = functools.reduce(lambda a, b: a + b, [a.curve for a in asks])
    whole = admission.Ask(
        "dp_event", 1, {"dp_event": event}, total, label, metadata, principal.key_id
    )
    req_hash = (
        idempotency.request_hash({"dp_event": event, "label": label, "metadata": metadata})
        if idempotency_key is not None
        else ""
    )

    def work(s: Session, st: DatasetState) -> r.ChargeBatch | r.DryRun | BudgetExceeded:
        if idempotency_key is not None and not dry_run:
            first = idempotency.replay(
                s, st.id, DP_EVENT_SCOPE, idempotency_key, req_hash, principal.key_id
            )
            if first is not None:
                return idempotency.replayed(r.ChargeBatch, first)
        verification.check_formulas_current(s, db)
        admission.check_not_archived(st)
        if (
            st.is_pld
            and (why := pld_mechanisms.too_many_distinct([a.wire for a in asks])) is not None
        ):
            raise Unprocessable(f"dp_event: {why}")
        if st.partition_unit is not None:
            raise Unprocessable(
                f"dataset {st.name!r} is partitioned by {st.partition_unit}, and a dp_event "
                f"charge names no blocks: {EACH_MECHANISM}, giving its 'blocks'"
            )
        admission.prepare(s, st, whole)
        for a in asks:
            admission.check_allowed(st, a.kind)
            admission.check_admissible(st, a.kind, a.curve)
        dry = _whole(st, asks, whole)
        if dry_run:
            if not dry.admitted:
                raise refusals.refusal(st, whole, dry, dry_run=True)
            return r.DryRun(
                admitted=True,
                dry_run=True,
                spent=answers.spent(st),
                would_spend=answers.spent(st, dry.after, dry.spend_after),
                requested=answers.requested(st, whole.wire, total),
            )
        outcome: r.ChargeBatch | BudgetExceeded
        if dry.admitted:
            entries = [_append(s, st, a) for a in asks]
            outcome = r.ChargeBatch(entries=entries, spent=answers.spent(st))
        else:
            outcome = refusals.refuse(s, st, whole, dry, "charge")
        for a in asks:
            observability.count(
                s,
                observability.CHARGES,
                dataset=st.id,
                mechanism=a.kind,
                outcome="admitted" if dry.admitted else "refused",
            )
        if idempotency_key is not None:
            status, body = (
                (201, outcome.model_dump(mode="json"))
                if isinstance(outcome, r.ChargeBatch)
                else (409, outcome.to_problem())
            )
            idempotency.remember(
                s, st.id, DP_EVENT_SCOPE, idempotency_key, req_hash, status, body, principal.key_id
            )
        return outcome

    admission.warm_pld(ref, [a.wire for a in asks])
    outcome = admission.run_locked(db, ref, principal, work)
    if isinstance(outcome, BudgetExceeded):
        raise outcome
    return outcome


__all__ = ["charge", "charge_dp_event", "merged", "translate_dp_event"]
