"""A flood of random bearer keys, with no credential at all, must not starve the requests whose
keys the process knows (h3 finding 1: 5 ms became 0.8 s at 64 clients and 30 s at 256).

Every route is a sync ``def`` on the one shared worker pool (40 threads), and an unknown key
costs one scrypt: presented keys waiting for a KDF slot are at most ``MAX_KDF_WAITING`` beyond
the ``MAX_CONCURRENT_KDF`` running, the next one is refused at once (503 problem+json with
Retry-After), and a known key never waits for a slot nor loses its remembered digest to the
flood. Counted, not timed: the KDF is held on an Event while the flood is fired, and a timeout
below is only a guard against a hang, never a measured bound.
"""

from __future__ import annotations

import secrets
import threading
from concurrent.futures import Future, ThreadPoolExecutor, as_completed

import httpx
import pytest
from fastapi.testclient import TestClient

from app.services import key_digest
from app.services.key_digest import KeyDigester

HANG_GUARD = 120.0  # seconds: only so that a regression fails instead of hanging the suite
POOL_THREADS = 40  # AnyIO's default worker pool, which every sync route shares


def _bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _random_key() -> dict[str, str]:
    return _bearer("pl_v_" + secrets.token_urlsafe(32))


def _assert_busy(r: httpx.Response) -> None:
    assert r.status_code == 503, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    assert r.headers["Retry-After"] == "1"
    body = r.json()
    assert body["status"] == 503 and body["type"].endswith("/server-busy")


class HeldKdf:
    """``scrypt_digest`` that counts its calls and waits for ``release`` before computing."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered = threading.Semaphore(0)
        self.calls = 0
        self._lock = threading.Lock()
        self._real = key_digest.scrypt_digest

    def __call__(self, key: str, salt: bytes) -> str:
        with self._lock:
            self.calls += 1
        self.entered.release()
        assert self.release.wait(2 * HANG_GUARD), "the test never released the KDF"
        return self._real(key, salt)


def test_a_flood_of_unknown_keys_holds_only_the_kdf_queue_and_known_keys_pass(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    known = client.post("/v1/keys", json={"role": "viewer"}).json()["key"]
    assert client.get("/v1/datasets", headers=_bearer(known)).status_code == 200  # remembered
    digester = key_digest.digester(client.app.state.db)  # type: ignore[attr-defined]
    held = key_digest.MAX_CONCURRENT_KDF + key_digest.MAX_KDF_WAITING
    flood = POOL_THREADS + 20  # more than the whole worker pool
    assert held < POOL_THREADS
    kdf = HeldKdf()
    monkeypatch.setattr(key_digest, "scrypt_digest", kdf)

    with ThreadPoolExecutor(flood + 1) as pool:
        futures: list[Future[httpx.Response]] = []
        refused: list[httpx.Response] = []
        try:
            futures = [
                pool.submit(client.get, "/v1/datasets", headers=_random_key()) for _ in range(flood)
            ]
            # the KDF is held: every answer before the release is a refusal given at once
            for done in as_completed(futures, timeout=HANG_GUARD):
                refused.append(done.result())
                if len(refused) == flood - held:
                    break
            for _ in range(key_digest.MAX_CONCURRENT_KDF):
                assert kdf.entered.acquire(timeout=HANG_GUARD)
            # what the flood holds now: the KDF slots computing, MAX_KDF_WAITING queued, no more
            assert (digester.admitted, kdf.calls) == (held, key_digest.MAX_CONCURRENT_KDF)
            # a known key is answered while the flood's requests are still held
            answer = pool.submit(client.get, "/v1/datasets", headers=_bearer(known))
            assert answer.result(timeout=HANG_GUARD).status_code == 200
            assert kdf.calls == key_digest.MAX_CONCURRENT_KDF  # it cost no KDF
        finally:
            kdf.release.set()
        answers = [f.result(timeout=HANG_GUARD) for f in futures]

    for r in refused:
        _assert_busy(r)
    statuses = sorted(r.status_code for r in answers)
    assert statuses == [401] * held + [503] * (flood - held)
    assert kdf.calls == held and digester.admitted == 0  # each admitted key cost one scrypt


def test_a_full_kdf_queue_refuses_new_keys_at_once_but_never_known_keys_or_minting(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    known = client.post("/v1/keys", json={"role": "admin"}).json()["key"]
    digester = key_digest.digester(client.app.state.db)  # type: ignore[attr-defined]
    calls: list[str] = []
    real = key_digest.scrypt_digest

    def counted(key: str, salt: bytes) -> str:
        calls.append(key)
        return real(key, salt)

    monkeypatch.setattr(key_digest, "scrypt_digest", counted)
    monkeypatch.setattr(
        digester, "admitted", key_digest.MAX_CONCURRENT_KDF + key_digest.MAX_KDF_WAITING
    )  # as if a flood filled the slots and the queue
    _assert_busy(client.get("/v1/datasets", headers=_random_key()))
    # a body the route refuses (422) checks the key first: the same 503, not the 422
    _assert_busy(client.post("/v1/keys", json={"role": 7}, headers=_random_key()))
    assert calls == []  # refused: nothing computed, nothing waited for
    # the known key works, and mints a key: minting waits for a slot, it is never refused
    minted = client.post("/v1/keys", json={"role": "viewer"}, headers=_bearer(known))
    assert minted.status_code == 201, minted.text
    assert len(calls) == 1
    # the minted key is known to this process at once: no KDF, no refusal
    assert client.get("/v1/datasets", headers=_bearer(minted.json()["key"])).status_code == 200
    monkeypatch.undo()  # the queue drains
    assert client.get("/v1/datasets", headers=_random_key()).status_code == 401


def test_unknown_keys_never_evict_the_digests_of_known_keys(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[str] = []

    def counted(key: str, salt: bytes) -> str:
        calls.append(key)
        return "s1$" + key

    monkeypatch.setattr(key_digest, "scrypt_digest", counted)
    monkeypatch.setattr(key_digest, "CACHE_SIZE", 4)
    digester = KeyDigester(b"salt")
    found = digester.digest("a-known-key")
    digester.known("a-known-key", found)  # what authentication does when the row is found
    minted = digester.mint("a-minted-key")
    unknown = [f"unknown-{i}" for i in range(50)]
    for key in unknown:
        digester.digest(key)
    assert digester.digest("a-known-key") == found and digester.digest("a-minted-key") == minted
    assert calls == ["a-known-key", "a-minted-key", *unknown]  # nothing computed twice
    digester.digest(unknown[-1])  # the latest unknown keys are remembered too (a retried typo)
    assert len(calls) == 2 + len(unknown)
    digester.digest(unknown[0])  # the oldest were evicted, by their own kind only
    assert calls[-1] == unknown[0]


def test_parallel_requests_with_one_new_key_share_one_kdf_and_none_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Helper gc's finding: after a restart, a pipeline's 16 parallel charges with its stored key
    got 7 x 503 (the KDF queue holds 9) and cost 9 scrypts of that one key; the docs promise one
    scrypt per key per process and 503 only in a flood of keys. The 16 now share one computation.
    The KDF is held until all 16 have asked (counted, not timed)."""
    parallel = 16
    assert parallel > key_digest.MAX_CONCURRENT_KDF + key_digest.MAX_KDF_WAITING
    digester = KeyDigester(b"0123456789abcdef")
    asked = threading.Semaphore(0)
    kdf = HeldKdf()
    monkeypatch.setattr(key_digest, "scrypt_digest", kdf)
    real_lookup = digester._lookup

    def lookup(tag: bytes) -> str | None:
        found = real_lookup(tag)
        asked.release()
        return found

    monkeypatch.setattr(digester, "_lookup", lookup)
    key = "pl_p_" + secrets.token_urlsafe(32)
    with ThreadPoolExecutor(parallel) as pool:
        futures = [pool.submit(digester.digest, key) for _ in range(parallel)]
        try:
            for _ in range(parallel):  # every request has looked for a remembered digest
                assert asked.acquire(timeout=HANG_GUARD)
        finally:
            kdf.release.set()
        outcomes = []
        for f in futures:
            try:
                outcomes.append(f.result(timeout=HANG_GUARD))
            except key_digest.ServerBusy as exc:
                outcomes.append(exc)
    assert outcomes == [kdf._real(key, digester.salt)] * parallel
    assert kdf.calls == 1 and digester.joined == parallel - 1 and digester.admitted == 0
