"""Python client for pipelines (httpx).

Typical use::

    from app.client import LedgerClient, gaussian

    with LedgerClient() as ledger:            # PRIVACY_LEDGER_URL / PRIVACY_LEDGER_API_KEY
        answer = ledger.calibrate("census", "gaussian", sensitivity=1.0)
        mech = answer["mechanism"]            # the least noise that still fits
        with ledger.reservation("census", mech, label="monthly counts") as hold:
            release = noisy_counts(sigma=mech["sigma"])   # committed when the block exits
        publish(release)

Retries: connection errors, 5xx and 429 are retried with exponential back-off; every logical
charge carries one ``Idempotency-Key`` (uuid4) for all its attempts, so a retry after a
dropped connection charges once. Reservation commit and release are idempotent on the server.

Exceptions (each carries the problem+json fields as attributes and in ``.problem``)::

    LedgerError
    +-- TransportError      the server could not be reached after all retries
    +-- Unauthorized (401)
    +-- Forbidden (403)
    +-- NotFound (404)
    +-- Conflict (409)
    |   +-- BudgetExceeded (409, .spent / .budget / .requested)
    +-- InvalidRequest (400, 413, 422)

``from_dp_event`` translates a dp_accounting ``DpEvent`` into our mechanisms by its class name
and attributes (dp_accounting is not imported, and no client-supplied module is ever imported).
"""

from __future__ import annotations

import math
import os
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import httpx

__all__ = [
    "BudgetExceeded",
    "Conflict",
    "Forbidden",
    "InvalidRequest",
    "LedgerClient",
    "LedgerError",
    "NotFound",
    "Reservation",
    "TransportError",
    "Unauthorized",
    "discrete_laplace",
    "from_dp_event",
    "gaussian",
    "laplace",
    "randomized_response",
    "rappor",
    "subsampled_gaussian",
]

Mechanism = dict[str, Any]


# --- mechanism helpers ---------------------------------------------------------------------


def gaussian(sigma: float, sensitivity: float = 1.0, count: int = 1) -> Mechanism:
    """Gaussian noise of standard deviation ``sigma`` on a query of L2 ``sensitivity``."""
    return {"mechanism": "gaussian", "sigma": sigma, "sensitivity": sensitivity, "count": count}


def laplace(
    epsilon: float | None = None,
    *,
    scale: float | None = None,
    sensitivity: float | None = None,
    count: int = 1,
) -> Mechanism:
    """Laplace noise: ``laplace(0.5)`` or ``laplace(scale=2.0, sensitivity=1.0)``."""
    if (epsilon is None) == (scale is None):
        raise ValueError("give epsilon, or scale (with sensitivity)")
    if epsilon is not None:
        return {"mechanism": "laplace", "epsilon": epsilon, "count": count}
    return {
        "mechanism": "laplace",
        "scale": scale,
        "sensitivity": sensitivity or 1.0,
        "count": count,
    }


def randomized_response(epsilon: float, k: int = 2, count: int = 1) -> Mechanism:
    """k-ary randomized response with parameter ``epsilon``."""
    return {"mechanism": "randomized_response", "epsilon": epsilon, "k": k, "count": count}


def rappor(epsilon: float, count: int = 1) -> Mechanism:
    """One-time RAPPOR; ``epsilon`` is the total for one user's value change."""
    return {"mechanism": "rappor", "epsilon": epsilon, "count": count}


def subsampled_gaussian(
    sigma: float, sample_rate: float, steps: int = 1, count: int = 1
) -> Mechanism:
    """DP-SGD: ``steps`` Poisson-subsampled Gaussian steps, noise multiplier ``sigma``."""
    return {
        "mechanism": "subsampled_gaussian",
        "sigma": sigma,
        "sample_rate": sample_rate,
        "steps": steps,
        "count": count,
    }


def discrete_laplace(epsilon: float, sensitivity: int = 1, count: int = 1) -> Mechanism:
    """Discrete Laplace on integers with integer L1 ``sensitivity``."""
    return {
        "mechanism": "discrete_laplace",
        "epsilon": epsilon,
        "sensitivity": sensitivity,
        "count": count,
    }


# --- dp_accounting interop -----------------------------------------------------------------


def from_dp_event(event: Any) -> list[Mechanism]:
    """Translate a dp_accounting ``DpEvent`` into a list of our mechanisms.

    Supported (by class name and attributes, without importing dp_accounting):
    ``GaussianDpEvent(noise_multiplier)`` -> gaussian with sigma = noise_multiplier, sensitivity 1;
    ``LaplaceDpEvent(noise_multiplier)`` -> laplace with epsilon = 1 / noise_multiplier;
    ``RandomizedResponseDpEvent(noise_parameter p, num_buckets k)`` -> k-ary RR with
    epsilon = log(k / p - k + 1) (dp_accounting's REPLACE_ONE semantics);
    ``PoissonSampledDpEvent(sampling_probability, GaussianDpEvent)`` -> one DP-SGD step;
    ``SelfComposedDpEvent(event, count)`` and ``ComposedDpEvent(events)``.
    Anything else raises ``ValueError`` naming the event.
    """
    name = type(event).__name__
    if name == "GaussianDpEvent":
        nm = float(event.noise_multiplier)
        if nm <= 0:
            raise ValueError(
                "GaussianDpEvent with noise_multiplier 0 is not differentially private"
            )
        return [gaussian(sigma=nm, sensitivity=1.0)]
    if name == "LaplaceDpEvent":
        nm = float(event.noise_multiplier)
        if nm <= 0:
            raise ValueError("LaplaceDpEvent with noise_multiplier 0 is not differentially private")
        return [laplace(1.0 / nm)]
    if name == "RandomizedResponseDpEvent":
        p, k = float(event.noise_parameter), int(event.num_buckets)
        if not 0 < p <= 1 or k < 2:
            raise ValueError(
                f"RandomizedResponseDpEvent(noise_parameter={p}, num_buckets={k}): no translation"
            )
        if p == 1:
            return []  # uniform output: no privacy cost
        return [randomized_response(math.log(k / p - k + 1), k)]
    if name == "PoissonSampledDpEvent":
        inner = event.event
        if type(inner).__name__ != "GaussianDpEvent":
            raise ValueError(
                f"PoissonSampledDpEvent over {type(inner).__name__} has no translation"
            )
        return [
            subsampled_gaussian(float(inner.noise_multiplier), float(event.sampling_probability))
        ]
    if name == "SelfComposedDpEvent":
        parts = from_dp_event(event.event)
        n = int(event.count)
        return [_repeat(m, n) for m in parts]
    if name == "ComposedDpEvent":
        out: list[Mechanism] = []
        for e in event.events:
            out.extend(from_dp_event(e))
        return out
    if name == "NoOpDpEvent":
        return []
    raise ValueError(f"{name} has no translation to privacy-ledger mechanisms")


def _repeat(m: Mechanism, n: int) -> Mechanism:
    if m["mechanism"] == "subsampled_gaussian" and m.get("count", 1) == 1:
        return {**m, "steps": m["steps"] * n}
    return {**m, "count": m.get("count", 1) * n}


# --- errors ----------------------------------------------------------------------------------


class LedgerError(Exception):
    """An error answer from the ledger (problem+json fields as attributes and in ``problem``)."""

    def __init__(self, status: int, problem: Mapping[str, Any]) -> None:
        self.status = status
        self.problem = dict(problem)
        self.detail = str(problem.get("detail", ""))
        self.title = str(problem.get("title", ""))
        self.type = str(problem.get("type", ""))
        super().__init__(f"{status} {self.title}: {self.detail}")

    def __getattr__(self, name: str) -> Any:
        try:
            return self.__dict__["problem"][name]
        except KeyError:
            raise AttributeError(name) from None


class TransportError(LedgerError):
    """The server could not be reached (after retries)."""


class Unauthorized(LedgerError):
    pass


class Forbidden(LedgerError):
    pass


class NotFound(LedgerError):
    pass


class Conflict(LedgerError):
    pass


class BudgetExceeded(Conflict):
    """Would exceed the budget; see ``spent``, ``budget`` and ``requested``."""


class InvalidRequest(LedgerError):
    pass


def _error_for(response: httpx.Response) -> LedgerError:
    try:
        problem = response.json()
        if not isinstance(problem, dict):
            problem = {"detail": str(problem)}
    except ValueError:
        problem = {"detail": response.text[:500]}
    status = response.status_code
    if status == 409 and str(problem.get("type", "")).endswith("budget-exceeded"):
        return BudgetExceeded(status, problem)
    cls = {401: Unauthorized, 403: Forbidden, 404: NotFound, 409: Conflict}.get(status)
    if cls is None:
        cls = InvalidRequest if 400 <= status < 500 else LedgerError
    return cls(status, problem)


# --- the client --------------------------------------------------------------------------------


class Reservation:
    """A held budget: ``commit()`` records it, ``release()`` frees it."""

    def __init__(self, client: LedgerClient, data: dict[str, Any]) -> None:
        self._client = client
        self.data = data
        self.id: str = data["id"]
        self.outcome: str | None = None

    def commit(self) -> dict[str, Any]:
        answer = self._client.commit(self.id)
        self.outcome, self.data = answer["status"], answer
        return answer

    def release(self) -> dict[str, Any]:
        answer = self._client.release(self.id)
        self.outcome, self.data = answer["status"], answer
        return answer


class LedgerClient:
    """A typed client for the privacy-ledger HTTP API.

    ``url`` and ``api_key`` default to ``PRIVACY_LEDGER_URL`` (else http://127.0.0.1:8000) and
    ``PRIVACY_LEDGER_API_KEY``. ``retries`` attempts after the first, with exponential back-off
    from ``backoff`` seconds.
    """

    def __init__(
        self,
        url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float = 30.0,
        retries: int = 4,
        backoff: float = 0.2,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.url = (url or os.environ.get("PRIVACY_LEDGER_URL") or "http://127.0.0.1:8000").rstrip(
            "/"
        )
        key = api_key or os.environ.get("PRIVACY_LEDGER_API_KEY")
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self.retries = retries
        self.backoff = backoff
        self._http = httpx.Client(
            base_url=self.url, headers=headers, timeout=timeout, transport=transport
        )

    def __enter__(self) -> LedgerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    # -- transport with retries --

    def _request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        ok: tuple[int, ...] = (200, 201),
        idempotent: bool = True,
    ) -> Any:
        """One logical request with retries. A non-idempotent request (creating a dataset or a
        key) is retried only when it surely never reached the server (connection refused)."""
        attempt = 0
        while True:
            try:
                r = self._http.request(method, path, json=json, params=params, headers=headers)
            except httpx.TransportError as exc:
                unsent = isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout)
                if attempt >= self.retries or not (idempotent or unsent):
                    raise TransportError(0, {"detail": f"{type(exc).__name__}: {exc}"}) from exc
            else:
                if r.status_code in ok:
                    return r.json()
                transient = r.status_code >= 500 or r.status_code == 429
                if not transient or attempt >= self.retries or not idempotent:
                    raise _error_for(r)
            time.sleep(self.backoff * (2**attempt))
            attempt += 1

    # -- accounting --

    def compose(
        self, mechanisms: list[Mechanism], delta: float, accounting: str = "rdp"
    ) -> dict[str, Any]:
        """What-if: epsilon of a fixed list of mechanisms at ``delta`` (nothing is recorded)."""
        body = {"mechanisms": mechanisms, "delta": delta, "accounting": accounting}
        return dict(self._request("POST", "/v1/accounting/compose", json=body))

    # -- datasets --

    def datasets(self) -> list[dict[str, Any]]:
        return list(self._request("GET", "/v1/datasets")["datasets"])

    def dataset(self, dataset: str) -> dict[str, Any]:
        return dict(self._request("GET", f"/v1/datasets/{dataset}"))

    def create_dataset(
        self, name: str, epsilon: float, delta: float, **fields: Any
    ) -> dict[str, Any]:
        body = {"name": name, "budget": {"epsilon": epsilon, "delta": delta}, **fields}
        return dict(self._request("POST", "/v1/datasets", json=body, idempotent=False))

    def budget(self, dataset: str) -> dict[str, Any]:
        return dict(self._request("GET", f"/v1/datasets/{dataset}/budget"))

    def spend(
        self, dataset: str, *, delta: float | None = None, epsilon: float | None = None
    ) -> dict[str, Any]:
        """Epsilon at another ``delta``, or delta at an ``epsilon``."""
        params = {"delta": delta} if delta is not None else {"epsilon": epsilon}
        return dict(self._request("GET", f"/v1/datasets/{dataset}/spend", params=params))

    def ledger(self, dataset: str, limit: int = 50, cursor: str | None = None) -> dict[str, Any]:
        params: dict[str, Any] = {"limit": limit, **({"cursor": cursor} if cursor else {})}
        return dict(self._request("GET", f"/v1/datasets/{dataset}/ledger", params=params))

    def calibrate(
        self, dataset: str, mechanism: str, parameter: str | None = None, **fixed: Any
    ) -> dict[str, Any]:
        """The least noise / largest epsilon / most steps that still fits: ``answer["mechanism"]``
        is a complete mechanism ready to charge."""
        params = {
            "mechanism": mechanism,
            **({"parameter": parameter} if parameter else {}),
            **fixed,
        }
        return dict(self._request("GET", f"/v1/datasets/{dataset}/calibrate", params=params))

    # -- charging --

    def charge(
        self,
        dataset: str,
        mechanism: Mechanism,
        *,
        label: str | None = None,
        metadata: dict[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> dict[str, Any]:
        """Record one invocation: ``{"entry", "spent"}``, or ``BudgetExceeded``. Retries reuse one
        Idempotency-Key, so the charge happens once."""
        key = idempotency_key or str(uuid.uuid4())
        body = {"mechanism": mechanism, "label": label, "metadata": metadata}
        return dict(
            self._request(
                "POST",
                f"/v1/datasets/{dataset}/charges",
                json=body,
                headers={"Idempotency-Key": key},
            )
        )

    def dry_run(self, dataset: str, mechanism: Mechanism) -> dict[str, Any]:
        """Would this charge be admitted? (``BudgetExceeded`` if not; nothing is recorded.)"""
        return dict(
            self._request(
                "POST",
                f"/v1/datasets/{dataset}/charges",
                json={"mechanism": mechanism},
                params={"dry_run": "true"},
            )
        )

    def reserve(
        self,
        dataset: str,
        mechanism: Mechanism,
        *,
        ttl_seconds: int = 600,
        label: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> Reservation:
        """Hold budget for a planned invocation (``BudgetExceeded`` when it does not fit).

        Retried only if the request surely never arrived: a lost answer could leave a hold
        behind, which expires and is charged, never freed (fail closed)."""
        body = {
            "mechanism": mechanism,
            "ttl_seconds": ttl_seconds,
            "label": label,
            "metadata": metadata,
        }
        data = self._request(
            "POST", f"/v1/datasets/{dataset}/reservations", json=body, idempotent=False
        )
        return Reservation(self, dict(data))

    def commit(self, reservation_id: str) -> dict[str, Any]:
        """Commit a reservation into the ledger (idempotent)."""
        return dict(self._request("POST", f"/v1/reservations/{reservation_id}/commit"))

    def release(self, reservation_id: str) -> dict[str, Any]:
        """Release a reservation: you assert that no output derived from it was released."""
        return dict(self._request("DELETE", f"/v1/reservations/{reservation_id}"))

    @contextmanager
    def reservation(
        self,
        dataset: str,
        mechanism: Mechanism,
        *,
        ttl_seconds: int = 600,
        label: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> Iterator[Reservation]:
        """Hold budget around a block: committed when the block exits normally, released when it
        raises. By using the block you assert that no output computed inside it left the block
        before an exception (if it may have, call ``hold.commit()`` yourself before re-raising)."""
        hold = self.reserve(
            dataset, mechanism, ttl_seconds=ttl_seconds, label=label, metadata=metadata
        )
        try:
            yield hold
        except BaseException:
            if hold.outcome is None:
                hold.release()
            raise
        if hold.outcome is None:
            hold.commit()
