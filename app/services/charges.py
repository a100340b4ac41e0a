"""The charge: authenticate the caller, then, under the dataset's lock (grouped with the
concurrent writes on the same dataset, ``admission.run_locked``), dry-run the new curve through
its filter (active reservations counted as spent) and either append a ledger entry or record a
rejection. Retries with the same Idempotency-Key return the first answer (``idempotency``).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from app import observability
from app import responses as r
from app.accounting.mechanisms import Mechanism
from app.db.engine import Database
from app.errors import BudgetExceeded
from app.principal import Caller
from app.services import admission, answers, idempotency
from app.services.auth import authenticated
from app.services.state import DatasetState

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
) -> r.Charge | r.DryRun:
    """Charge ``mechanism`` to dataset ``ref``: the new entry and the spend after it, or
    ``BudgetExceeded`` (409) after recording the rejection. With ``dry_run`` the answer says it
    would be admitted (or 409) and nothing is recorded. A replayed Idempotency-Key returns the
    stored first answer (or raises the stored refusal).
    """
    principal = authenticated(db, caller)
    ask = admission.Ask.of(mechanism, wire, label, metadata, principal.key_id)
    req_hash = idempotency.request_hash({"mechanism": wire, "label": label, "metadata": metadata})

    def work(s: Session, st: DatasetState) -> r.Charge | r.DryRun | BudgetExceeded:
        if idempotency_key is not None and not dry_run:
            first = idempotency.replay(s, st.id, SCOPE, idempotency_key, req_hash)
            if first is not None:
                return r.Charge.model_validate(first)
        admission.check_not_archived(st)
        admission.check_allowed(st, ask.kind)
        dry = admission.decide(st, ask)
        if dry_run:
            if not dry.admitted:
                raise admission.refusal(st, ask, dry, dry_run=True)
            return r.DryRun(
                admitted=True,
                dry_run=True,
                spent=answers.spent(st),
                would_spend=answers.spent(st, dry.after, dry.spend_after),
                requested=answers.requested(st, wire, ask.curve),
            )
        outcome: r.Charge | BudgetExceeded
        if dry.admitted:
            entry = admission.append(
                s, st, ask, dry.after, dry.spend_after, pld_after=dry.pld_after
            )
            outcome = r.Charge(entry=entry, spent=answers.spent(st))
        else:
            outcome = admission.refuse(s, st, ask, dry, "charge")
        admitted = isinstance(outcome, r.Charge)
        observability.count(
            s,
            observability.CHARGES,
            dataset=st.id,
            mechanism=ask.kind,
            outcome="admitted" if admitted else "refused",
        )
        if idempotency_key is not None:
            status, body = (
                (201, outcome.model_dump(mode="json"))
                if isinstance(outcome, r.Charge)
                else (409, outcome.to_problem())
            )
            idempotency.remember(s, st.id, SCOPE, idempotency_key, req_hash, status, body)
        return outcome

    outcome = admission.run_locked(db, ref, principal, work)
    if isinstance(outcome, BudgetExceeded):
        raise outcome  # the rejection is committed
    return outcome


__all__ = ["charge"]
