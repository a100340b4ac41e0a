"""The asyncio client (``httpx.AsyncClient``): the same operations as ``LedgerClient``, awaited."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, Literal, TextIO, TypeVar, overload

import httpx

from privacy_ledger_client import _calls as calls
from privacy_ledger_client._calls import Call, Delivery, Plan
from privacy_ledger_client._config import Endpoint, read_answer
from privacy_ledger_client._errors import InvalidRequest, TransportError, add_note, stream_failure
from privacy_ledger_client._models import (
    Allocation,
    ApiKey,
    AuditEvent,
    Block,
    BudgetStatus,
    Calibration,
    Charge,
    ChargeBatch,
    Composition,
    Dataset,
    DryRun,
    LedgerPage,
    NewApiKey,
    RejectionPage,
    Reservation,
    SpendQuery,
)
from privacy_ledger_client._retry import RetryPolicy
from privacy_ledger_client.dp_events import dp_event_to_dict
from privacy_ledger_client.integrations import opacus_dp_event, opacus_error, opendp_mechanism

T = TypeVar("T")


class AsyncHold:
    """A reservation held by an ``AsyncLedgerClient`` (see ``Hold``)."""

    def __init__(self, client: AsyncLedgerClient, reservation: Reservation) -> None:
        self._client = client
        self.reservation = reservation
        self.outcome: str | None = None

    @property
    def id(self) -> str:
        return self.reservation.id

    async def commit(self) -> Reservation:
        """As ``Hold.commit``."""
        self.reservation = await self._client.commit(self.id)
        self.outcome = self.reservation.status
        return self.reservation

    async def release(self) -> Reservation:
        """As ``Hold.release``."""
        self.reservation = await self._client.release(self.id)
        self.outcome = self.reservation.status
        return self.reservation


class AsyncLedgerClient:
    """An asyncio client for the privacy-ledger HTTP API.

    ``url`` and ``api_key`` default to ``PRIVACY_LEDGER_URL`` (else http://127.0.0.1:8000) and
    ``PRIVACY_LEDGER_API_KEY`` (a URL that is not http(s)://host[:port] raises ValueError at
    once). Failed requests are retried ``retries`` times with exponential
    back-off from ``backoff`` seconds (see ``RetryPolicy``); ``transport`` replaces httpx's.
    Use it as an async context manager, or call ``aclose()``.
    """

    def __init__(
        self,
        url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float = 30.0,
        retries: int = 4,
        backoff: float = 0.2,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._endpoint = Endpoint.resolve(url, api_key)
        self.url = self._endpoint.url
        self.retry = RetryPolicy(retries=retries, backoff=backoff)
        self._http = httpx.AsyncClient(
            base_url=self.url,
            headers=self._endpoint.headers,
            timeout=timeout,
            transport=transport,
        )

    async def __aenter__(self) -> AsyncLedgerClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def send(self, call: Call[T]) -> T:
        """Send one logical request, retrying as ``call.delivery`` and the policy allow."""
        attempt = 0
        while True:
            response: httpx.Response | None = None
            try:
                response = await self._http.request(
                    call.method, call.path, json=call.json, params=call.params, headers=call.headers
                )
            except httpx.TransportError as exc:
                if not self.retry.after_error(call, exc, attempt):
                    raise TransportError(
                        0, {"detail": f"{type(exc).__name__}: {exc}", "url": self.url}
                    ) from exc
            else:
                if response.status_code in call.ok:
                    answer: T = read_answer(call, response)
                    return answer
                if not self.retry.after_status(call, response, attempt):
                    raise self._endpoint.error(response)
            await asyncio.sleep(self.retry.delay(attempt, response))
            attempt += 1

    async def _run(self, plan: Plan[T]) -> T:
        """As ``LedgerClient._run``."""
        call = next(plan)
        while True:
            try:
                call = plan.send(await self.send(call))
            except StopIteration as done:
                result: T = done.value
                return result

    async def _stream(self, call: Call[Any], write: Callable[[str], object]) -> int:
        """As ``LedgerClient._stream``."""
        attempt = 0
        written = 0
        while True:
            response: httpx.Response | None = None
            try:
                async with self._http.stream(
                    call.method, call.path, json=call.json, params=call.params, headers=call.headers
                ) as response:
                    if response.status_code in call.ok:
                        async for chunk in response.aiter_text():
                            write(chunk)
                            written += len(chunk)
                        return written
                    await response.aread()
                    if not self.retry.after_status(call, response, attempt):
                        raise self._endpoint.error(response)
            except httpx.TransportError as exc:
                if written or not self.retry.after_error(call, exc, attempt):
                    raise TransportError(
                        0, {"detail": stream_failure(exc, written), "url": self.url}
                    ) from exc
            await asyncio.sleep(self.retry.delay(attempt, response))
            attempt += 1

    async def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        delivery: Delivery = Delivery.SAFE,
    ) -> Any:
        """As ``LedgerClient.request``."""
        return await self.send(calls.raw(method, path, json, params, headers, delivery))

    # -- accounting --

    async def compose(
        self, mechanisms: Sequence[Mapping[str, Any]], delta: float, accounting: str = "rdp"
    ) -> Composition:
        """As ``LedgerClient.compose``."""
        return await self.send(calls.compose(mechanisms, delta, accounting))

    # -- datasets --

    async def datasets(self, archived: str | None = None) -> list[Dataset]:
        """As ``LedgerClient.datasets``."""
        return await self._run(calls.datasets(archived))

    async def dataset(self, dataset: str) -> Dataset:
        """As ``LedgerClient.dataset``."""
        return await self.send(calls.dataset(dataset))

    async def create_dataset(
        self, name: str, epsilon: float, delta: float, **fields: Any
    ) -> Dataset:
        """As ``LedgerClient.create_dataset``."""
        return await self.send(calls.create_dataset(name, epsilon, delta, fields))

    async def update_dataset(self, dataset: str, **changes: Any) -> Dataset:
        """As ``LedgerClient.update_dataset``."""
        return await self.send(calls.update_dataset(dataset, changes))

    async def archive_dataset(self, dataset: str) -> Dataset:
        """As ``LedgerClient.archive_dataset``."""
        return await self.send(calls.archive_dataset(dataset, True))

    async def unarchive_dataset(self, dataset: str) -> Dataset:
        """As ``LedgerClient.unarchive_dataset``."""
        return await self.send(calls.archive_dataset(dataset, False))

    async def budget(self, dataset: str) -> BudgetStatus:
        """As ``LedgerClient.budget``."""
        return await self.send(calls.budget(dataset))

    async def spend(
        self, dataset: str, *, delta: float | None = None, epsilon: float | None = None
    ) -> SpendQuery:
        """As ``LedgerClient.spend``."""
        return await self.send(calls.spend(dataset, delta, epsilon))

    async def ledger(
        self,
        dataset: str,
        limit: int = 50,
        cursor: str | None = None,
        *,
        kind: str | None = None,
        label: str | None = None,
        key: str | None = None,
        allocation: str | None = None,
        block: str | None = None,
    ) -> LedgerPage:
        """As ``LedgerClient.ledger``."""
        filters = {
            "kind": kind,
            "label": label,
            "key": key,
            "allocation": allocation,
            "block": block,
        }
        return await self.send(calls.ledger(dataset, limit, cursor, filters))

    async def export_ledger(
        self,
        dataset: str,
        out: TextIO,
        format: str = "csv",
        *,
        kind: str | None = None,
        label: str | None = None,
        key: str | None = None,
        allocation: str | None = None,
        block: str | None = None,
    ) -> int:
        """As ``LedgerClient.export_ledger`` (``out.write`` is called as chunks arrive)."""
        filters = {
            "kind": kind,
            "label": label,
            "key": key,
            "allocation": allocation,
            "block": block,
        }
        return await self._stream(calls.export_ledger(dataset, format, filters), out.write)

    async def calibrate(
        self,
        dataset: str,
        mechanism: str,
        parameter: str | None = None,
        *,
        allocation: str | None = None,
        blocks: tuple[str, str] | None = None,
        **fixed: Any,
    ) -> Calibration:
        """As ``LedgerClient.calibrate``."""
        return await self.send(
            calls.calibrate(dataset, mechanism, parameter, fixed, allocation, blocks)
        )

    # -- charging --

    async def charge(
        self,
        dataset: str,
        mechanism: Mapping[str, Any],
        *,
        label: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
        allocation: str | None = None,
        blocks: tuple[str, str] | None = None,
    ) -> Charge:
        """As ``LedgerClient.charge``."""
        return await self.send(
            calls.charge(dataset, mechanism, label, metadata, idempotency_key, allocation, blocks)
        )

    @overload
    async def charge_dp_event(
        self,
        dataset: str,
        event: Any,
        *,
        label: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
        dry_run: Literal[False] = False,
    ) -> ChargeBatch: ...

    @overload
    async def charge_dp_event(
        self,
        dataset: str,
        event: Any,
        *,
        label: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
        dry_run: Literal[True],
    ) -> DryRun: ...

    async def charge_dp_event(
        self,
        dataset: str,
        event: Any,
        *,
        label: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
        dry_run: bool = False,
    ) -> ChargeBatch | DryRun:
        """Charge a dp_accounting ``DpEvent`` (the object, or its JSON from
        ``dp_event_to_dict``): one ledger entry per mechanism it translates to, all admitted
        together or none (``BudgetExceeded``); an event type with no translation is
        ``InvalidRequest`` naming it. One Idempotency-Key for every retry. ``dry_run``: only
        ask whether it would be admitted (a ``DryRun``, or ``BudgetExceeded``); nothing is
        recorded, and the label, metadata and key are not sent."""
        body = event if isinstance(event, Mapping) else dp_event_to_dict(event)
        if dry_run:
            return await self.send(calls.dry_run_dp_event(dataset, body))
        return await self.send(
            calls.charge_dp_event(dataset, body, label, metadata, idempotency_key)
        )

    @overload
    async def charge_opacus(
        self,
        dataset: str,
        history: Iterable[Sequence[Any]],
        *,
        label: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
        dry_run: Literal[False] = False,
    ) -> ChargeBatch: ...

    @overload
    async def charge_opacus(
        self,
        dataset: str,
        history: Iterable[Sequence[Any]],
        *,
        label: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
        dry_run: Literal[True],
    ) -> DryRun: ...

    async def charge_opacus(
        self,
        dataset: str,
        history: Iterable[Sequence[Any]],
        *,
        label: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
        dry_run: bool = False,
    ) -> ChargeBatch | DryRun:
        """Charge an Opacus training run from its accountant's history, a list of
        ``(noise_multiplier, sample_rate, steps)``, in one request (all or none); a refused
        value names its ``history[i]``. ``dry_run`` as for ``charge_dp_event``."""
        steps = [tuple(item) for item in history]
        event = opacus_dp_event(steps)
        try:
            if dry_run:
                return await self.charge_dp_event(dataset, event, dry_run=True)
            return await self.charge_dp_event(
                dataset, event, label=label, metadata=metadata, idempotency_key=idempotency_key
            )
        except InvalidRequest as exc:
            named = opacus_error(exc, steps)
            if named is exc:
                raise
            raise named from exc

    @overload
    async def charge_opendp(
        self,
        dataset: str,
        measurement: Any,
        d_in: Any,
        *,
        label: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
        dry_run: Literal[False] = False,
    ) -> Charge: ...

    @overload
    async def charge_opendp(
        self,
        dataset: str,
        measurement: Any,
        d_in: Any,
        *,
        label: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
        dry_run: Literal[True],
    ) -> DryRun: ...

    async def charge_opendp(
        self,
        dataset: str,
        measurement: Any,
        d_in: Any,
        *,
        label: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
        dry_run: bool = False,
    ) -> Charge | DryRun:
        """Charge an OpenDP measurement at input distance ``d_in``: its privacy map's epsilon,
        (epsilon, delta) or rho as a ``pure_dp``, ``approx_dp`` or ``zcdp`` entry. ``dry_run``
        as for ``charge_dp_event``."""
        mechanism = opendp_mechanism(measurement, d_in)
        if dry_run:
            return await self.dry_run(dataset, mechanism)
        return await self.charge(
            dataset,
            mechanism,
            label=label,
            metadata=metadata,
            idempotency_key=idempotency_key,
        )

    async def dry_run(
        self,
        dataset: str,
        mechanism: Mapping[str, Any],
        *,
        allocation: str | None = None,
        blocks: tuple[str, str] | None = None,
    ) -> DryRun:
        """As ``LedgerClient.dry_run``."""
        return await self.send(calls.dry_run(dataset, mechanism, allocation, blocks))

    async def reserve(
        self,
        dataset: str,
        mechanism: Mapping[str, Any],
        *,
        ttl_seconds: int = 600,
        label: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        allocation: str | None = None,
        blocks: tuple[str, str] | None = None,
    ) -> AsyncHold:
        """As ``LedgerClient.reserve``."""
        return AsyncHold(
            self,
            await self.send(
                calls.reserve(dataset, mechanism, ttl_seconds, label, metadata, allocation, blocks)
            ),
        )

    async def reservation_status(self, reservation_id: str) -> Reservation:
        """As ``LedgerClient.reservation_status``."""
        return await self.send(calls.reservation(reservation_id))

    async def commit(self, reservation_id: str) -> Reservation:
        """As ``LedgerClient.commit``."""
        return await self.send(calls.commit(reservation_id))

    async def release(self, reservation_id: str) -> Reservation:
        """As ``LedgerClient.release``."""
        return await self.send(calls.release(reservation_id))

    @asynccontextmanager
    async def reservation(
        self,
        dataset: str,
        mechanism: Mapping[str, Any],
        *,
        ttl_seconds: int = 600,
        label: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        allocation: str | None = None,
        blocks: tuple[str, str] | None = None,
    ) -> AsyncIterator[AsyncHold]:
        """``async with``: as ``LedgerClient.reservation`` (commit on normal exit, release when
        the block raises)."""
        hold = await self.reserve(
            dataset,
            mechanism,
            ttl_seconds=ttl_seconds,
            label=label,
            metadata=metadata,
            allocation=allocation,
            blocks=blocks,
        )
        try:
            yield hold
        except BaseException as exc:
            if hold.outcome is None:
                try:
                    await hold.release()
                except Exception as failure:  # the hold expires and is charged: fail closed
                    add_note(exc, f"releasing reservation {hold.id} failed too: {failure}")
            raise
        if hold.outcome is None:
            await hold.commit()

    # -- budget structures: allocations and blocks --

    async def create_allocation(
        self,
        dataset: str,
        name: str,
        epsilon: float,
        delta: float,
        entry_delta_budget: float | None = None,
    ) -> Allocation:
        """As ``LedgerClient.create_allocation``."""
        return await self.send(
            calls.create_allocation(dataset, name, epsilon, delta, entry_delta_budget)
        )

    async def allocations(self, dataset: str) -> list[Allocation]:
        """As ``LedgerClient.allocations``."""
        return await self.send(calls.allocations(dataset))

    async def allocation(self, dataset: str, name: str) -> Allocation:
        """As ``LedgerClient.allocation``."""
        return await self.send(calls.allocation(dataset, name))

    async def update_allocation(
        self,
        dataset: str,
        name: str,
        *,
        epsilon: float | None = None,
        delta: float | None = None,
    ) -> Allocation:
        """As ``LedgerClient.update_allocation``."""
        return await self.send(calls.update_allocation(dataset, name, epsilon, delta))

    async def blocks(
        self, dataset: str, first: str, last: str, *, allocation: str | None = None
    ) -> list[Block]:
        """As ``LedgerClient.blocks``."""
        return await self.send(calls.blocks(dataset, first, last, allocation))

    # -- administration --

    async def create_key(
        self,
        role: str,
        datasets: Sequence[str] | None = None,
        label: str | None = None,
        *,
        allocations: Sequence[str] | None = None,
    ) -> NewApiKey:
        """As ``LedgerClient.create_key``."""
        return await self.send(calls.create_key(role, datasets, label, allocations))

    async def keys(self) -> list[ApiKey]:
        """As ``LedgerClient.keys``."""
        return await self.send(calls.keys())

    async def revoke_key(self, key_id: str) -> ApiKey:
        """As ``LedgerClient.revoke_key``."""
        return await self.send(calls.revoke_key(key_id))

    async def rejections(
        self, dataset: str | None = None, limit: int = 100, cursor: str | None = None
    ) -> RejectionPage:
        """As ``LedgerClient.rejections``."""
        return await self.send(calls.rejections(dataset, limit, cursor))

    async def audit(
        self,
        dataset: str | None = None,
        action: str | None = None,
        limit: int = 100,
        before_id: int | None = None,
    ) -> list[AuditEvent]:
        """As ``LedgerClient.audit``."""
        return await self.send(calls.audit(dataset, action, limit, before_id))


__all__ = ["AsyncHold", "AsyncLedgerClient"]
