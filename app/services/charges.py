"""The charge: one transaction that authenticates the caller, locks the dataset, dry-runs the new
curve through its filter (active reservations counted as spent) and either appends a ledger
entry or records a rejection (``admission``). Retries with the same Idempotency-Key return the
first answer (``idempotency``).
"""

from __future__ import annotations

from typing import Any

from app import observability
from app import responses as r
from app.accounting.mechanisms import Mechanism
from app.db.engine import Database
from app.errors import BudgetExceeded
from app.principal import Caller
from app.services import admission, answers, idempotency
from app.services.auth import authenticate

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
    req_hash = idempotency.request_hash({"mechanism": wire, "label": label, "metadata": metadata})
    problem: BudgetExceeded | None = None
    with db.write() as s:
        principal = authenticate(s, caller)
        ask = admission.Ask.of(mechanism, wire, label, metadata, principal.key_id)
        with admission.locked(s, ref, principal) as st:
            if idempotency_key is not None and not dry_run:
                first = idempotency.replay(s, st.id, SCOPE, idempotency_key, req_hash)
                if first is not None:
                    return r.Charge.model_validate(first)
            admission.check_allowed(st, ask.kind)
            dry = admission.decide(st, ask.curve)
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
            answer: r.Charge | None = None
            if dry.admitted:
                entry = admission.append(s, st, ask, dry.after, dry.spend_after)
                answer = r.Charge(entry=entry, spent=answers.spent(st))
            else:
                problem = admission.refuse(s, st, ask, dry, "charge")
            observability.count(
                s,
                observability.CHARGES,
                dataset=st.id,
                mechanism=ask.kind,
                outcome="admitted" if answer is not None else "refused",
            )
            if idempotency_key is not None:
                status, body = (
                    (201, answer.model_dump(mode="json"))
                    if answer is not None
                    else (409, problem.to_problem() if problem else {})
                )
                idempotency.remember(s, st.id, SCOPE, idempotency_key, req_hash, status, body)
    if problem is not None:
        raise problem
    assert answer is not None
    return answer


__all__ = ["charge"]
