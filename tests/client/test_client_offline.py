"""Client behaviour that needs no server: tolerant reading, retries, idempotency keys, errors.

A scripted ``httpx.MockTransport`` plays the server, so every attempt the client makes is
counted and inspected.
"""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from privacy_ledger_client import (
    AsyncLedgerClient,
    BudgetExceeded,
    Dataset,
    DecodingError,
    InvalidRequest,
    LedgerClient,
    NotFound,
    RetryPolicy,
    ServerError,
    TransportError,
    laplace,
)
from privacy_ledger_client._config import DEFAULT_URL
from privacy_ledger_client._models import parse

SPENT = {"epsilon": 0.1, "delta": 1e-6, "rho": None, "pure_epsilon": 0.1, "method": "pure_dp"}
ENTRY = {"id": 1, "dataset_id": "ds_1", "mechanism": {"mechanism": "laplace", "epsilon": 0.1}}
DATASET = {
    "id": "ds_1",
    "name": "census",
    "budget": {"epsilon": 1.0, "delta": 1e-6},
    "spent": SPENT,
    "remaining": {"epsilon": 0.9, "delta": 1e-6, "rho": None},
    "exhausted": False,
    "entries": 1,
    "created_at": "2026-11-23T10:00:00.123456Z",
}


class Script:
    """A fake server: answers in order, recording every request it receives."""

    def __init__(self, *answers: httpx.Response | Exception) -> None:
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def _json(status: int, body: Any, **headers: str) -> httpx.Response:
    return httpx.Response(status, json=body, headers=headers)


def _client(script: Script) -> LedgerClient:
    return LedgerClient(
        "http://ledger.test", "k", backoff=0.0, transport=httpx.MockTransport(script)
    )


def test_answers_ignore_unknown_fields_and_default_missing_optional_ones() -> None:
    newer = {**DATASET, "allocations": [{"name": "team-a"}], "spent": {**SPENT, "order": 4.5}}
    ds = parse(Dataset, newer)
    assert ds.id == "ds_1" and ds.spent.epsilon == 0.1 and ds.spent.filter is None
    assert ds.description is None and ds.mechanism_counts is None
    assert ds.raw["allocations"] == [{"name": "team-a"}] and ds.spent.raw["order"] == 4.5
    assert ds.created_at is not None and ds.created_at.utcoffset() is not None
    assert isinstance(ds.budget.epsilon, float)


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ({k: v for k, v in DATASET.items() if k != "id"}, "Dataset: the field 'id' is missing"),
        ({**DATASET, "entries": "many"}, "Dataset.entries: expected an integer"),
        ({**DATASET, "budget": None}, "Dataset.budget: null where a value is required"),
        ({**DATASET, "spent": {"delta": 1e-6}}, "Dataset.spent: the field 'epsilon' is missing"),
    ],
)
def test_unreadable_answers_raise_decoding_error(body: dict[str, Any], problem: str) -> None:
    with _client(Script(_json(200, body))) as c, pytest.raises(DecodingError, match=problem):
        c.dataset("census")


def test_transient_answers_are_retried_with_one_idempotency_key() -> None:
    script = Script(
        _json(503, {"title": "Database unavailable"}),
        httpx.ReadTimeout("answer lost"),
        _json(201, {"entry": ENTRY, "spent": SPENT}),
    )
    with _client(script) as c:
        answer = c.charge("census", laplace(0.1), label="q1")
    assert answer.entry.id == 1 and answer.spent.pure_epsilon == 0.1
    keys = {r.headers["Idempotency-Key"] for r in script.requests}
    assert len(script.requests) == 3 and len(keys) == 1
    assert {json.loads(r.content)["label"] for r in script.requests} == {"q1"}


def test_each_logical_charge_has_its_own_key_and_a_given_key_is_kept() -> None:
    script = Script(*(_json(201, {"entry": ENTRY, "spent": SPENT}) for _ in range(3)))
    with _client(script) as c:
        c.charge("census", laplace(0.1))
        c.charge("census", laplace(0.1))
        c.charge("census", laplace(0.1), idempotency_key="run-42/step-7")
    keys = [r.headers["Idempotency-Key"] for r in script.requests]
    assert keys[0] != keys[1] and keys[2] == "run-42/step-7"


def test_retries_stop_after_the_policy_allows() -> None:
    script = Script(*(_json(503, {"detail": "down"}) for _ in range(3)))
    with (
        LedgerClient(
            "http://ledger.test", "k", retries=2, backoff=0.0, transport=httpx.MockTransport(script)
        ) as c,
        pytest.raises(ServerError, match="down"),
    ):
        c.budget("census")
    assert len(script.requests) == 3


NOT_REPEATABLE: list[Callable[[LedgerClient], object]] = [
    lambda c: c.reserve("census", laplace(0.1)),
    lambda c: c.create_dataset("census", 1.0, 1e-6),
    lambda c: c.create_key("viewer"),
]
"""Calls the server must not see twice (a second reservation would hold budget again)."""


@pytest.mark.parametrize("operation", NOT_REPEATABLE)
def test_non_idempotent_requests_are_repeated_only_when_surely_unsent(
    operation: Callable[[LedgerClient], object],
) -> None:
    lost = Script(httpx.ReadError("answer lost"))
    with _client(lost) as c, pytest.raises(TransportError, match="answer lost"):
        operation(c)
    assert len(lost.requests) == 1
    unavailable = Script(_json(503, {"detail": "database unavailable"}))
    with _client(unavailable) as c, pytest.raises(ServerError):
        operation(c)
    assert len(unavailable.requests) == 1
    refused = Script(httpx.ConnectError("connection refused"), httpx.ConnectError("refused"))
    with (
        LedgerClient(
            "http://ledger.test",
            "k",
            retries=1,
            backoff=0.0,
            transport=httpx.MockTransport(refused),
        ) as c,
        pytest.raises(TransportError),
    ):
        operation(c)
    assert len(refused.requests) == 2


def test_an_empty_datasets_list_is_sent_as_such_never_as_every_dataset() -> None:
    """``create_key(role, datasets=[])`` (say, a filter that matched nothing) sent
    ``"datasets": null``, which means every dataset: an unscoped key. The empty list goes to
    the server, which refuses it (422)."""
    created = {"id": "key_1", "role": "viewer", "datasets": None, "key": "pl_v_x"}
    problem = {"status": 422, "detail": "datasets: an empty list reaches no dataset"}
    script = Script(_json(422, problem), _json(201, created))
    with _client(script) as c:
        with pytest.raises(InvalidRequest, match="reaches no dataset"):
            c.create_key("viewer", datasets=[])
        c.create_key("viewer")
    sent = [json.loads(r.content)["datasets"] for r in script.requests]
    assert sent == [[], None]


def test_budget_exceeded_is_typed() -> None:
    problem = {
        "type": "https://privacy-ledger.dev/problems/budget-exceeded",
        "title": "Privacy budget exceeded",
        "status": 409,
        "detail": "refused",
        "spent": SPENT,
        "budget": {"epsilon": 1.0, "delta": 1e-6},
        "requested": {"mechanism": {"mechanism": "laplace", "epsilon": 5.0}, "epsilon": 5.0},
        "limit": "dataset",
    }
    with _client(Script(_json(409, problem))) as c, pytest.raises(BudgetExceeded) as info:
        c.charge("census", laplace(5.0))
    e = info.value
    assert e.budget is not None and e.budget.epsilon == 1.0 and e.limit == "dataset"
    assert e.requested is not None and e.requested.epsilon == 5.0 and e.would_spend is None


def test_retry_after_is_honoured_within_the_cap() -> None:
    policy = RetryPolicy(retries=3, backoff=0.5, max_backoff=4.0)
    assert [policy.delay(a, None) for a in range(4)] == [0.5, 1.0, 2.0, 4.0]
    assert policy.delay(0, _json(503, {}, **{"Retry-After": "3"})) == 3.0
    assert policy.delay(0, _json(503, {}, **{"Retry-After": "120"})) == 4.0
    with pytest.raises(ValueError, match="retry settings"):
        RetryPolicy(retries=-1)


def test_async_client_retries_like_the_sync_one() -> None:
    script = Script(
        httpx.RemoteProtocolError("server went away"),
        _json(502, {"detail": "bad gateway"}),
        _json(201, {"entry": ENTRY, "spent": SPENT}),
    )

    async def charge() -> int:
        async with AsyncLedgerClient(
            "http://ledger.test", "k", backoff=0.0, transport=httpx.MockTransport(script)
        ) as c:
            return (await c.charge("census", laplace(0.1))).entry.id

    assert asyncio.run(charge()) == 1
    assert len({r.headers["Idempotency-Key"] for r in script.requests}) == 1
    assert len(script.requests) == 3


# --- the ledger export (GET /v1/datasets/{id}/ledger?format=csv|jsonl, streamed) ------------

EXPORT = 'id,seq,label,metadata\n1,1,"café, ""q""","{""i"":0}"\n2,2,x,\n'


def _streamed(chunks: list[bytes], then: Exception | None = None) -> httpx.Response:
    """A 200 whose body arrives in ``chunks`` (then ``then`` is raised, if given)."""

    def body() -> Iterator[bytes]:
        yield from chunks
        if then is not None:
            raise then

    return httpx.Response(200, content=body(), headers={"content-type": "text/csv; charset=utf-8"})


def test_export_ledger_writes_the_servers_export_as_it_streams() -> None:
    raw = EXPORT.encode()
    cut = raw.index("é".encode()) + 1  # a chunk ends inside a UTF-8 character
    script = Script(_json(503, {"detail": "busy"}), _streamed([raw[:cut], raw[cut:]]))
    out = io.StringIO()
    with _client(script) as c:
        written = c.export_ledger(
            "census 2026", out, kind="gaussian", allocation="team-a", block="2026-11-02"
        )
    assert out.getvalue() == EXPORT and written == len(EXPORT)
    assert len(script.requests) == 2  # the transient answer was waited out
    sent = script.requests[-1]
    assert sent.url.raw_path.split(b"?")[0] == b"/v1/datasets/census%202026/ledger"
    assert dict(sent.url.params) == {
        "format": "csv",
        "kind": "gaussian",
        "allocation": "team-a",
        "block": "2026-11-02",
    }


def test_export_ledger_errors() -> None:
    missing = Script(_json(404, {"title": "Not Found", "detail": "no dataset 'nope'"}))
    out = io.StringIO()
    with _client(missing) as c, pytest.raises(NotFound, match="nope"):
        c.export_ledger("nope", out, "jsonl")
    assert out.getvalue() == "" and len(missing.requests) == 1
    # a failure before anything was written is retried like any read
    before = Script(httpx.ReadError("reset"), _streamed([EXPORT.encode()]))
    with _client(before) as c:
        c.export_ledger("census", out)
    assert out.getvalue() == EXPORT and len(before.requests) == 2
    # after the first chunk it is not (the text would repeat): the error says it is incomplete
    during = Script(_streamed([b"id,seq\n1,1\n"], httpx.ReadError("reset")), _streamed([]))
    out = io.StringIO()
    with _client(during) as c, pytest.raises(TransportError, match="incomplete"):
        c.export_ledger("census", out)
    assert out.getvalue() == "id,seq\n1,1\n" and len(during.requests) == 1
    with _client(Script()) as c, pytest.raises(ValueError, match="csv or jsonl"):
        c.export_ledger("census", out, "json")


def test_async_client_exports_like_the_sync_one() -> None:
    lines = '{"id":1,"seq":1}\n{"id":2,"seq":2}\n'
    script = Script(
        _json(502, {"detail": "bad gateway"}),
        httpx.Response(
            200, content=lines.encode(), headers={"content-type": "application/x-ndjson"}
        ),
    )
    out = io.StringIO()

    async def export() -> int:
        async with AsyncLedgerClient(
            "http://ledger.test", "k", backoff=0.0, transport=httpx.MockTransport(script)
        ) as c:
            return await c.export_ledger("census", out, "jsonl", kind="laplace")

    assert asyncio.run(export()) == len(lines) and out.getvalue() == lines
    assert len(script.requests) == 2
    assert dict(script.requests[-1].url.params) == {"format": "jsonl", "kind": "laplace"}


# --- listing every dataset (GET /v1/datasets, paged by offset) ------------------------------


class PagedDatasets:
    """``GET /v1/datasets`` as the server answers it: by name, ``limit`` (default and most
    1000) from ``offset``, with ``total`` beside them. ``total`` may be overstated, to play a
    server whose datasets were archived between pages, and left out, to play an older one."""

    def __init__(self, n: int, total: int | None = None, with_total: bool = True) -> None:
        self.items = [{**DATASET, "id": f"ds_{k}", "name": f"d{k:04d}"} for k in range(n)]
        self.total = n if total is None else total
        self.with_total = with_total
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        limit = min(int(request.url.params.get("limit", 1000)), 1000)
        offset = int(request.url.params.get("offset", 0))
        page: dict[str, Any] = {"datasets": self.items[offset : offset + limit]}
        if self.with_total:
            page["total"] = self.total
        return _json(200, page)


def test_datasets_reads_every_page_up_to_the_total() -> None:
    """1003 datasets: the listing returned the first page only (1000, the server's default
    limit) and d1002 disappeared, although ``datasets()`` promises every dataset."""
    server = PagedDatasets(1003)
    with LedgerClient("http://ledger.test", "k", transport=httpx.MockTransport(server)) as c:
        got = c.datasets(archived="all")
    assert [d.name for d in got] == [d["name"] for d in server.items]
    assert [dict(r.url.params) for r in server.requests] == [
        {"archived": "all", "offset": "0", "limit": "1000"},
        {"archived": "all", "offset": "1000", "limit": "1000"},
    ]


def test_async_datasets_reads_every_page_like_the_sync_one() -> None:
    server = PagedDatasets(2500)

    async def listing() -> list[Dataset]:
        async with AsyncLedgerClient(
            "http://ledger.test", "k", transport=httpx.MockTransport(server)
        ) as c:
            return await c.datasets()

    got = asyncio.run(listing())
    assert len(got) == 2500 and got[-1].name == "d2499"
    assert [r.url.params["offset"] for r in server.requests] == ["0", "1000", "2000"]
    assert "archived" not in server.requests[0].url.params


@pytest.mark.parametrize(
    ("server", "requests"),
    [
        (PagedDatasets(0), 1),  # nothing to list: one request
        (PagedDatasets(1000), 1),  # exactly one full page: the total says it is the last
        (PagedDatasets(1003, total=5000), 3),  # the total overstated: an empty page ends it
        (PagedDatasets(1003, with_total=False), 2),  # no total (older server): a short page
        (PagedDatasets(2000, with_total=False), 3),  # ... or an empty one
    ],
)
def test_datasets_paging_ends(server: PagedDatasets, requests: int) -> None:
    with LedgerClient("http://ledger.test", "k", transport=httpx.MockTransport(server)) as c:
        got = c.datasets()
    assert len(got) == len(server.items) and len(server.requests) == requests


def test_datasets_paging_retries_a_page_and_lists_a_shifted_dataset_once() -> None:
    """A page is a read, retried as any; a dataset created meanwhile before the offset shifts
    the names, so the next page repeats the last one seen: it is listed once."""
    first = [{**DATASET, "id": f"ds_{k}", "name": f"d{k:04d}"} for k in range(1000)]
    second = [first[-1], {**DATASET, "id": "ds_new", "name": "e"}]
    script = Script(
        _json(200, {"datasets": first, "total": 1001}),
        _json(503, {"detail": "busy"}),
        _json(200, {"datasets": second, "total": 1002}),
    )
    with _client(script) as c:
        got = c.datasets()
    assert [d.id for d in got] == [d["id"] for d in first] + ["ds_new"]
    assert [r.url.params["offset"] for r in script.requests] == ["0", "1000", "1000"]


BUSY = {
    "type": "https://privacy-ledger.dev/problems/server-busy",
    "title": "Server busy",
    "status": 503,
    "detail": "too many unknown keys are waiting for their check",
}


@pytest.mark.parametrize("operation", NOT_REPEATABLE)
def test_a_server_busy_503_is_repeated_for_every_call(
    operation: Callable[[LedgerClient], object],
) -> None:
    """The server answers 503 server-busy before it reads the request (a flood of unknown keys
    fills the queue for their check), so even a call that must not be sent twice repeats it;
    another 503 on such a call is not repeated (test above)."""
    script = Script(
        _json(503, BUSY, **{"Retry-After": "0"}), _json(422, {"detail": "the second answer"})
    )
    with _client(script) as c, pytest.raises(Exception, match="the second answer") as info:
        operation(c)
    assert not isinstance(info.value, ServerError)
    assert len(script.requests) == 2
    assert script.requests[0].content == script.requests[1].content


@pytest.mark.parametrize(
    "url", ["localhost:8000", "127.0.0.1:8000", "ftp://ledger.test", "http://"]
)
@pytest.mark.parametrize("make", [LedgerClient, AsyncLedgerClient])
def test_a_url_that_is_not_http_is_refused_at_once(url: str, make: Any) -> None:
    """Newcomer audit (stop 31): ``url="localhost:8000"`` was retried for about 3 s as a
    transient failure before ``UnsupportedProtocol``. It is refused when the client is made,
    before any request (the transport would count one)."""
    script = Script()
    with pytest.raises(ValueError, match="must look like http://host:port") as caught:
        make(url, "k", transport=httpx.MockTransport(script))
    assert repr(url) in str(caught.value) and "the url argument" in str(caught.value)
    assert script.requests == []


def test_an_unreachable_server_is_named_in_the_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """Newcomer audit (stop 31): the message was httpx's alone ("ConnectError: [Errno 111]
    Connection refused"); it now names the URL and the setting it came from. ``detail`` stays
    httpx's reason (the CLI words its own message around it)."""
    monkeypatch.setenv("PRIVACY_LEDGER_URL", "http://ledger.test:9")
    refused = Script(*[httpx.ConnectError("Connection refused")] * 3)
    with (
        LedgerClient(
            api_key="k", retries=2, backoff=0.0, transport=httpx.MockTransport(refused)
        ) as c,
        pytest.raises(TransportError) as caught,
    ):
        c.dataset("census")
    assert len(refused.requests) == 3
    assert str(caught.value) == (
        "cannot reach the server at http://ledger.test:9: ConnectError: Connection refused "
        "(the url given to the client, else PRIVACY_LEDGER_URL, else the default "
        "http://127.0.0.1:8000)"
    )
    assert str(caught.value).endswith(f"the default {DEFAULT_URL})")  # the client's own default
    assert caught.value.detail == "ConnectError: Connection refused"


@pytest.mark.parametrize("make", [LedgerClient, AsyncLedgerClient])
def test_no_part_of_the_client_shows_its_api_key_in_a_repr(make: Any) -> None:
    """The client's endpoint (URL and request headers) is a dataclass whose repr showed the
    ``Authorization`` header, key and all (authz46): what a debugger, ``pytest --showlocals`` or
    an error tracker that records a frame's locals (``self`` inside the endpoint's methods)
    writes down. No repr of the client or of what it holds carries the key."""
    key = "pl_p_" + "S3cret" * 8
    client = make("http://ledger.test", key, transport=httpx.MockTransport(Script()))
    assert all(key not in repr(part) for part in (client, *vars(client).values()))


def test_the_reservation_context_manager_names_an_allocation_and_blocks() -> None:
    """``reservation(...)`` is ``reserve`` as a context manager (docs/client.md), but it took
    no ``allocation`` or ``blocks``: on a partitioned dataset every hold it made was a 422, and
    a key limited to allocations could not use it at all (403). Both clients pass them on."""
    held = {"id": "rsv_1", "status": "active", "dataset_id": "ds_1"}
    committed = {**held, "status": "committed", "ledger_entry_id": 1}
    expected = {"allocation": "team-a", "blocks": {"from": "2026-11-20", "to": "2026-11-22"}}
    blocks = ("2026-11-20", "2026-11-22")

    script = Script(_json(201, held), _json(200, committed))
    with (
        _client(script) as c,
        c.reservation("clicks", laplace(0.1), allocation="team-a", blocks=blocks) as hold,
    ):
        pass
    assert hold.outcome == "committed"
    body = json.loads(script.requests[0].content)
    assert {k: body.get(k) for k in expected} == expected

    async def reserve_async() -> dict[str, Any]:
        script = Script(_json(201, held), _json(200, committed))
        async with (
            AsyncLedgerClient(
                "http://ledger.test", "k", backoff=0.0, transport=httpx.MockTransport(script)
            ) as c,
            c.reservation("clicks", laplace(0.1), allocation="team-a", blocks=blocks),
        ):
            pass
        return dict(json.loads(script.requests[0].content))

    body = asyncio.run(reserve_async())
    assert {k: body.get(k) for k in expected} == expected
