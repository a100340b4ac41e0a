"""privacy-ledger-client: charge differentially private releases to a privacy budget.

Typical use::

    from privacy_ledger_client import LedgerClient, gaussian

    with LedgerClient() as ledger:           # PRIVACY_LEDGER_URL / PRIVACY_LEDGER_API_KEY
        plan = ledger.calibrate("census", "gaussian", sensitivity=1.0)
        with ledger.reservation("census", plan.mechanism, label="monthly counts") as hold:
            release = noisy_counts(sigma=plan.mechanism["sigma"])  # committed on normal exit
        publish(release)

``AsyncLedgerClient`` offers the same operations to asyncio code (``async with``, ``await``).
Answers are frozen dataclasses (``Dataset``, ``Charge``, ``BudgetStatus``, ...) read tolerantly:
fields a newer server adds are ignored (and kept in ``.raw``), missing optional ones are None.

Retries: connection failures and transient answers (429, 502, 503, 504) are retried with
exponential back-off. A charge carries one ``Idempotency-Key`` for all its attempts, so a retry
after a lost answer charges once; reservation commit and release are idempotent on the server.
Creating a dataset, a key or a reservation is repeated only when the server surely never read
it (a refused connection, a 503 ``server-busy``): a lost reservation answer would leave a hold
that expires and is charged.

Exceptions (each carries ``status``, ``type``, ``title``, ``detail`` and the whole ``problem``)::

    LedgerError
    ├── TransportError          the server could not be reached, after every retry
    ├── DecodingError           an answer this client cannot read
    └── HTTPStatusError         an error status
        ├── InvalidRequest      400, 413, 422: the reason is in ``detail``
        ├── Unauthorized        401
        ├── Forbidden           403
        ├── NotFound            404
        ├── Conflict            409
        │   └── BudgetExceeded  409 over budget: ``spent``, ``budget``, ``requested``
        ├── RateLimited         429, after every retry
        └── ServerError         5xx, after every retry

``dp_event_to_dict`` writes a dp_accounting ``DpEvent`` as plain JSON (``pip install
'privacy-ledger-client[dp]'`` brings dp_accounting itself); ``charge_dp_event`` charges one,
``charge_opacus`` an Opacus history ``[(noise_multiplier, sample_rate, steps), ...]`` and
``charge_opendp`` an OpenDP measurement's privacy map, each in one request.
"""

from privacy_ledger_client._async import AsyncHold, AsyncLedgerClient
from privacy_ledger_client._calls import Call, Delivery
from privacy_ledger_client._config import DEFAULT_URL, __version__
from privacy_ledger_client._errors import (
    BudgetExceeded,
    Conflict,
    DecodingError,
    Forbidden,
    HTTPStatusError,
    InvalidRequest,
    LedgerError,
    NotFound,
    RateLimited,
    ServerError,
    TransportError,
    Unauthorized,
)
from privacy_ledger_client._mechanisms import (
    Mechanism,
    approx_dp,
    discrete_laplace,
    exponential,
    gaussian,
    laplace,
    mechanism,
    pure_dp,
    randomized_response,
    rappor,
    rdp,
    subsampled_gaussian,
    zcdp,
)
from privacy_ledger_client._models import (
    Allocation,
    ApiKey,
    AuditEvent,
    Block,
    Budget,
    BudgetStatus,
    Calibration,
    Charge,
    ChargeBatch,
    Composition,
    Dataset,
    DryRun,
    LedgerEntry,
    LedgerPage,
    Model,
    NewApiKey,
    Rejection,
    RejectionPage,
    Remaining,
    Requested,
    Reservation,
    Reserved,
    SpendQuery,
    Spent,
)
from privacy_ledger_client._retry import RetryPolicy
from privacy_ledger_client._sync import Hold, LedgerClient
from privacy_ledger_client.dp_events import dp_event_to_dict
from privacy_ledger_client.integrations import opacus_dp_event, opendp_mechanism

__all__ = [
    "DEFAULT_URL",
    "Allocation",
    "ApiKey",
    "Block",
    "AsyncHold",
    "AsyncLedgerClient",
    "AuditEvent",
    "Budget",
    "BudgetExceeded",
    "BudgetStatus",
    "Calibration",
    "Call",
    "Charge",
    "ChargeBatch",
    "Composition",
    "Conflict",
    "Dataset",
    "DecodingError",
    "Delivery",
    "DryRun",
    "Forbidden",
    "HTTPStatusError",
    "Hold",
    "InvalidRequest",
    "LedgerClient",
    "LedgerEntry",
    "LedgerError",
    "LedgerPage",
    "Mechanism",
    "Model",
    "NewApiKey",
    "NotFound",
    "RateLimited",
    "Rejection",
    "RejectionPage",
    "Remaining",
    "Requested",
    "Reservation",
    "Reserved",
    "RetryPolicy",
    "ServerError",
    "SpendQuery",
    "Spent",
    "TransportError",
    "Unauthorized",
    "__version__",
    "approx_dp",
    "discrete_laplace",
    "dp_event_to_dict",
    "exponential",
    "opacus_dp_event",
    "opendp_mechanism",
    "pure_dp",
    "rdp",
    "zcdp",
    "gaussian",
    "laplace",
    "mechanism",
    "randomized_response",
    "rappor",
    "subsampled_gaussian",
]
