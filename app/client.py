"""Deprecated home of the Python client: it now lives in ``privacy_ledger_client``.

This module re-exports that package, so ``from app.client import LedgerClient`` keeps working
while callers move to ``from privacy_ledger_client import LedgerClient``. It also keeps
``from_dp_event`` (deprecated too): the mechanisms a dp_accounting event is charged as, computed
here by the server's own translation. To charge an event, send it instead:
``LedgerClient.charge_dp_event(dataset, event)`` (the server translates it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from privacy_ledger_client import *  # noqa: F403 - the shim re-exports the whole public surface
from privacy_ledger_client import Mechanism, dp_event_to_dict
from privacy_ledger_client import __all__ as _client_all

from app.accounting import dp_events

__all__ = [*_client_all, "from_dp_event"]


# --- dp_accounting interop -----------------------------------------------------------------


def from_dp_event(event: Any) -> list[Mechanism]:
    """The mechanisms a dp_accounting ``DpEvent`` (the object, or its JSON from
    ``dp_event_to_dict``) is charged as by ``POST /v1/datasets/{id}/charges/dp_event``: the
    same translation (``app.accounting.dp_events.translate``), so the two cannot disagree.
    Identical mechanisms are merged (counts added); an event that costs nothing (``NoOpDpEvent``,
    a count of 0, a sampling probability of 0) gives ``[]``. The event types translated are
    those ``GET /v1/mechanisms`` lists; anything else, or a value out of range, raises
    ``ValueError`` naming the event, its field and value.
    """
    if isinstance(event, Mapping):
        data: Any = event
    else:
        try:
            data = dp_event_to_dict(event)
        except TypeError as exc:
            raise ValueError(f"{exc}: no translation to privacy-ledger mechanisms") from None
    return [m.to_dict() for m in dp_events.translate(data)]
