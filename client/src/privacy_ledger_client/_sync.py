"""The blocking client (``httpx.Client``)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
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


class Hold:
    """A reservation held by this client: ``commit()`` records it, ``release()`` frees it.

    ``outcome`` is None while the hold is active, then the reservation's final status
    (``committed``, ``released``, or ``expired`` when it outlived its TTL and was charged).
    """

    def __init__(self, client: LedgerClient, reservation: Reservation) -> None:
        self._client = client
        self.reservation = reservation
        self.outcome: str | None = None

    @property
    def id(self) -> str:
        return self.reservation.id

    def commit(self) -> Reservation:
        """Record the held invocation in the ledger (idempotent)."""
        self.reservation = self._client.commit(self.id)
        self.outcome = self.reservation.status
        return self.reservation

    def release(self) -> Reservation:
        """Free the hold: you assert that no output derived from it was released."""
        self.reservation = self._client.release(self.id)
        self.outcome = self.reservation.status
        return self.reservation


class LedgerClient:
    """A blocking client for the privacy-ledger HTTP API.

    ``url`` and ``api_key`` default to ``PRIVACY_LEDGER_URL`` (else http://127.0.0.1:8000) and
    ``PRIVACY_LEDGER_API_KEY`` (a URL that is not http(s)://host[:port] raises ValueError at
    once). Failed requests are retried ``retries`` times with exponential
    back-off from ``backoff`` seconds (see ``RetryPolicy``); ``transport`` replaces httpx's.
    Use it as a context manager, or call ``close()``.
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
        self._endpoint = Endpoint.resolve(url, api_key)
        self.url = self._endpoint.url
        self.retry = RetryPolicy(retries=retries, backoff=backoff)
        self._http = httpx.Client(
            base_url=self.url,
            headers=self._endpoint.headers,
            timeout=timeout,
            transport=transport,
        )

    def __enter__(self) -> LedgerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def send(self, call: Call[T]) -> T:
        """Send one logical request, retrying as ``call.delivery`` and the policy allow."""
        attempt = 0
        while True:
            response: httpx.Response | None = None
            try:
                response = self._http.request(
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
            time.sleep(self.retry.delay(attempt, response))
            attempt += 1

    def _run(self, plan: Plan[T]) -> T:
        """Carry out a ``Plan``: send each call it yields (as ``send`` does) and hand it the
        answer, until it returns its result."""
        call = next(plan)
        while True:
            try:
                call = plan.send(self.send(call))
            except StopIteration as done:
                result: T = done.value
                return result

    def _stream(self, call: Call[Any], write: Callable[[str], object]) -> int:
        """Send ``call`` and pass its answer's text to ``write`` chunk by chunk as it arrives;
        the number of characters written. Retried as ``send`` is until the first chunk is
        written, never after (the text would repeat)."""
        attempt = 0
        written = 0
        while True:
            response: httpx.Response | None = None
            try:
                with self._http.stream(
                    call.method, call.path, json=call.json, params=call.params, headers=call.headers
                ) as response:
                    if response.status_code in call.ok:
                        for chunk in response.iter_text():
                            write(chunk)
                            written += len(chunk)
                        return written
                    response.read()
                    if not self.retry.after_status(call, response, attempt):
                        raise self._endpoint.error(response)
            except httpx.TransportError as exc:
                if written or not self.retry.after_error(call, exc, attempt):
                    raise TransportError(
                        0, {"detail": stream_failure(exc, written), "url": self.url}
                    ) from exc
            time.sleep(self.retry.delay(attempt, response))
            attempt += 1

    def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        delivery: Delivery = Delivery.SAFE,
    ) -> Any:
        """Any endpoint, answered as plain JSON (for endpoints newer than this client)."""
        return self.send(calls.raw(method, path, json, params, headers, delivery))

    # -- accounting --

    def compose(
        self, mechanisms: Sequence[Mapping[str, Any]], delta: float, accounting: str = "rdp"
    ) -> Composition:
        """What-if: epsilon at ``delta`` of a fixed list of mechanisms (nothing is recorded)."""
        return self.send(calls.compose(mechanisms, delta, accounting))

    # -- datasets --

    def datasets(self, archived: str | None = None) -> list[Dataset]:
        """Every dataset this key may see, with its spend, by name; archived ones are left out
        unless ``archived`` is "true" (only them) or "all". Read a page of 1000 at a time until
        the server's ``total`` is reached."""
        return self._run(calls.datasets(archived))

    def dataset(self, dataset: str) -> Dataset:
        """One dataset (by id or name) with its spend."""
        return self.send(calls.dataset(dataset))

    def create_dataset(self, name: str, epsilon: float, delta: float, **fields: Any) -> Dataset:
        """Create a dataset (admin key); ``fields``: ``accounting``, ``adaptive``,
        ``allowed_mechanisms``, ``description``, ``entry_delta_budget`` (adaptive datasets: the
        part of ``delta`` set aside for mechanisms with their own delta), ``partition``,
        ``lifetime_budget``, ``lifetime_entry_delta_budget`` (its part for those deltas over all
        blocks, with both). Retried only if surely never sent."""
        return self.send(calls.create_dataset(name, epsilon, delta, fields))

    def update_dataset(self, dataset: str, **changes: Any) -> Dataset:
        """Change a dataset's budget or description (admin key; audited); ``changes`` are
        the PATCH body's members (``budget={"epsilon": 2.0}``, ``lifetime_budget=...``)."""
        return self.send(calls.update_dataset(dataset, changes))

    def archive_dataset(self, dataset: str) -> Dataset:
        """Retire a dataset (admin key; audited; reversible): it then refuses charges and
        reservations (409 dataset-archived), keeps its ledger readable and leaves the default
        listing."""
        return self.send(calls.archive_dataset(dataset, True))

    def unarchive_dataset(self, dataset: str) -> Dataset:
        """Undo ``archive_dataset`` (admin key; audited)."""
        return self.send(calls.archive_dataset(dataset, False))

    def budget(self, dataset: str) -> BudgetStatus:
        """Budget, spend, remaining (after active holds) and the number of entries."""
        return self.send(calls.budget(dataset))

    def spend(
        self, dataset: str, *, delta: float | None = None, epsilon: float | None = None
    ) -> SpendQuery:
        """Epsilon at another ``delta``, or delta at an ``epsilon``."""
        return self.send(calls.spend(dataset, delta, epsilon))

    def ledger(
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
        """One page of ledger entries, newest first; only those of a mechanism ``kind``,
        ``label``, ``key`` (id or label), ``allocation`` (name or id) or covering ``block``
        (a partitioned dataset's block key) when given."""
        filters = {
            "kind": kind,
            "label": label,
            "key": key,
            "allocation": allocation,
            "block": block,
        }
        return self.send(calls.ledger(dataset, limit, cursor, filters))

    def export_ledger(
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
        """Write the whole ledger to ``out`` (a text stream; open a file with ``newline=""``)
        exactly as the server exports it (``GET .../ledger?format=csv|jsonl``): oldest first,
        CSV with the server's header row and columns, or JSON Lines (``format="jsonl"``, one
        entry per line); only the entries of a mechanism ``kind``, ``label``, ``key`` (id or
        label), ``allocation`` (name or id) or covering ``block`` when given. Streamed as it
        arrives, so memory does not grow with the ledger. Returns the characters written.
        Retried like a read until the first chunk is written; a failure after that raises
        ``TransportError`` and leaves ``out`` incomplete."""
        filters = {
            "kind": kind,
            "label": label,
            "key": key,
            "allocation": allocation,
            "block": block,
        }
        return self._stream(calls.export_ledger(dataset, format, filters), out.write)

    def calibrate(
        self,
        dataset: str,
        mechanism: str,
        parameter: str | None = None,
        *,
        allocation: str | None = None,
        blocks: tuple[str, str] | None = None,
        **fixed: Any,
    ) -> Calibration:
        """The least noise / largest epsilon / most steps that still fits; ``.mechanism`` is
        complete and ready to charge. ``fixed``: the other parameters (``sensitivity=1.0``).
        ``allocation`` / ``blocks`` (required on a partitioned dataset): those the charge will
        name, so that every limit it must fit is counted."""
        return self.send(calls.calibrate(dataset, mechanism, parameter, fixed, allocation, blocks))

    # -- charging --

    def charge(
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
        """Record one invocation, or raise ``BudgetExceeded`` (nothing charged). Every retry
        carries the same Idempotency-Key (yours, or a fresh uuid4), so it is charged once."""
        return self.send(
            calls.charge(dataset, mechanism, label, metadata, idempotency_key, allocation, blocks)
        )

    @overload
    def charge_dp_event(
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
    def charge_dp_event(
        self,
        dataset: str,
        event: Any,
        *,
        label: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
        dry_run: Literal[True],
    ) -> DryRun: ...

    def charge_dp_event(
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
            return self.send(calls.dry_run_dp_event(dataset, body))
        return self.send(calls.charge_dp_event(dataset, body, label, metadata, idempotency_key))

    @overload
    def charge_opacus(
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
    def charge_opacus(
        self,
        dataset: str,
        history: Iterable[Sequence[Any]],
        *,
        label: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
        dry_run: Literal[True],
    ) -> DryRun: ...

    def charge_opacus(
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
                return self.charge_dp_event(dataset, event, dry_run=True)
            return self.charge_dp_event(
                dataset, event, label=label, metadata=metadata, idempotency_key=idempotency_key
            )
        except InvalidRequest as exc:
            named = opacus_error(exc, steps)
            if named is exc:
                raise
            raise named from exc

    @overload
    def charge_opendp(
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
    def charge_opendp(
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

    def charge_opendp(
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
            return self.dry_run(dataset, mechanism)
        return self.charge(
            dataset,
            mechanism,
            label=label,
            metadata=metadata,
            idempotency_key=idempotency_key,
        )

    def dry_run(
        self,
        dataset: str,
        mechanism: Mapping[str, Any],
        *,
        allocation: str | None = None,
        blocks: tuple[str, str] | None = None,
    ) -> DryRun:
        """Would this charge be admitted? ``BudgetExceeded`` if not; nothing is recorded."""
        return self.send(calls.dry_run(dataset, mechanism, allocation, blocks))

    def reserve(
        self,
        dataset: str,
        mechanism: Mapping[str, Any],
        *,
        ttl_seconds: int = 600,
        label: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        allocation: str | None = None,
        blocks: tuple[str, str] | None = None,
    ) -> Hold:
        """Hold budget for a planned invocation (``BudgetExceeded`` when it does not fit).
        Retried only if surely never sent: a lost answer would leave a hold behind, which
        expires and is charged, never freed (fail closed)."""
        return Hold(
            self,
            self.send(
                calls.reserve(dataset, mechanism, ttl_seconds, label, metadata, allocation, blocks)
            ),
        )

    def reservation_status(self, reservation_id: str) -> Reservation:
        """A reservation and its current status."""
        return self.send(calls.reservation(reservation_id))

    def commit(self, reservation_id: str) -> Reservation:
        """Commit a reservation into the ledger (idempotent)."""
        return self.send(calls.commit(reservation_id))

    def release(self, reservation_id: str) -> Reservation:
        """Release a reservation: you assert that no output derived from it was released."""
        return self.send(calls.release(reservation_id))

    @contextmanager
    def reservation(
        self,
        dataset: str,
        mechanism: Mapping[str, Any],
        *,
        ttl_seconds: int = 600,
        label: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        allocation: str | None = None,
        blocks: tuple[str, str] | None = None,
    ) -> Iterator[Hold]:
        """Hold budget around a block: committed when the block exits normally, released when
        it raises. By using the block you assert that nothing computed inside it was released
        before an exception (if it may have been, call ``hold.commit()`` before re-raising)."""
        hold = self.reserve(
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
                    hold.release()
                except Exception as failure:  # the hold expires and is charged: fail closed
                    add_note(exc, f"releasing reservation {hold.id} failed too: {failure}")
            raise
        if hold.outcome is None:
            hold.commit()

    # -- budget structures: allocations and blocks --

    def create_allocation(
        self,
        dataset: str,
        name: str,
        epsilon: float,
        delta: float,
        entry_delta_budget: float | None = None,
    ) -> Allocation:
        """Create a sub-budget of a dataset (admin key); ``entry_delta_budget``: the part of
        ``delta`` set aside for mechanisms with their own delta (on a dataset that has one)."""
        return self.send(calls.create_allocation(dataset, name, epsilon, delta, entry_delta_budget))

    def allocations(self, dataset: str) -> list[Allocation]:
        """A dataset's allocations with their spend."""
        return self.send(calls.allocations(dataset))

    def allocation(self, dataset: str, name: str) -> Allocation:
        """One allocation with its spend."""
        return self.send(calls.allocation(dataset, name))

    def update_allocation(
        self,
        dataset: str,
        name: str,
        *,
        epsilon: float | None = None,
        delta: float | None = None,
    ) -> Allocation:
        """Change an allocation's budget (admin key, audited)."""
        return self.send(calls.update_allocation(dataset, name, epsilon, delta))

    def blocks(
        self, dataset: str, first: str, last: str, *, allocation: str | None = None
    ) -> list[Block]:
        """Blocks ``first``..``last`` (inclusive) of a partitioned dataset, with spend."""
        return self.send(calls.blocks(dataset, first, last, allocation))

    # -- administration --

    def create_key(
        self,
        role: str,
        datasets: Sequence[str] | None = None,
        label: str | None = None,
        *,
        allocations: Sequence[str] | None = None,
    ) -> NewApiKey:
        """Create an API key (admin key); ``.key`` is the secret, shown this once."""
        return self.send(calls.create_key(role, datasets, label, allocations))

    def keys(self) -> list[ApiKey]:
        """Every key, newest first (never the secrets)."""
        return self.send(calls.keys())

    def revoke_key(self, key_id: str) -> ApiKey:
        """Revoke a key (idempotent)."""
        return self.send(calls.revoke_key(key_id))

    def rejections(
        self, dataset: str | None = None, limit: int = 100, cursor: str | None = None
    ) -> RejectionPage:
        """Refused charges and reservations, newest first: of ``dataset`` (a viewer key
        reads them), or of every dataset (an admin key)."""
        return self.send(calls.rejections(dataset, limit, cursor))

    def audit(
        self,
        dataset: str | None = None,
        action: str | None = None,
        limit: int = 100,
        before_id: int | None = None,
    ) -> list[AuditEvent]:
        """The audit trail, newest first (admin key)."""
        return self.send(calls.audit(dataset, action, limit, before_id))


__all__ = ["Hold", "LedgerClient"]
