"""Where the server is and how to authenticate, shared by both clients."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import httpx

from privacy_ledger_client._calls import Call
from privacy_ledger_client._errors import DecodingError, HTTPStatusError, Unauthorized, error_for

DEFAULT_URL = "http://127.0.0.1:8000"
REPLAYED_HEADER = "Idempotent-Replayed"
"""Set to ``true`` by the server on the stored first answer to a retried Idempotency-Key."""
URL_ENV = "PRIVACY_LEDGER_URL"
KEY_ENV = "PRIVACY_LEDGER_API_KEY"

try:
    __version__ = version("privacy-ledger-client")
except PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"


@dataclass(frozen=True)
class Endpoint:
    """The server's base URL and the request headers (the key, if any, and a User-Agent; kept
    out of the repr, which debuggers and error trackers record)."""

    url: str
    headers: dict[str, str] = dataclasses.field(repr=False)
    has_key: bool

    @classmethod
    def resolve(cls, url: str | None, api_key: str | None) -> Endpoint:
        """Arguments first, then ``PRIVACY_LEDGER_URL`` / ``PRIVACY_LEDGER_API_KEY``."""
        given = url or os.environ.get(URL_ENV) or DEFAULT_URL
        base = given.rstrip("/")
        try:
            parsed = httpx.URL(base) if "://" in base else None
        except httpx.InvalidURL:
            parsed = None
        if parsed is None or parsed.scheme not in ("http", "https") or not parsed.host:
            source = "the url argument" if url else URL_ENV if os.environ.get(URL_ENV) else ""
            raise ValueError(
                f"the server URL must look like http://host:port or https://host (got {given!r}"
                + (f" from {source})" if source else ")")
            )
        key = api_key or os.environ.get(KEY_ENV)
        headers = {"User-Agent": f"privacy-ledger-client/{__version__}"}
        if key:
            headers["Authorization"] = f"Bearer {key}"
        return cls(base, headers, bool(key))

    def error(self, response: httpx.Response) -> HTTPStatusError:
        """The exception for an error answer; a 401 without any key says how to give one."""
        exc = error_for(response)
        if isinstance(exc, Unauthorized) and not self.has_key:
            exc.detail += f" (no API key was given: pass api_key= or set {KEY_ENV})"
            exc.args = (f"{exc.status} {exc.title}: {exc.detail}",)
        return exc


def read_answer(call: Call[Any], response: httpx.Response) -> Any:
    """The typed answer of a successful response, or ``DecodingError``."""
    try:
        data = response.json()
    except ValueError:
        raise DecodingError(
            response.status_code, {"detail": f"not JSON: {response.text[:200]!r}"}
        ) from None
    try:
        answer = call.read(data)
    except ValueError as exc:
        raise DecodingError(response.status_code, {"detail": str(exc)}) from None
    if (
        response.headers.get(REPLAYED_HEADER) == "true"
        and dataclasses.is_dataclass(answer)
        and not isinstance(answer, type)
        and any(f.name == "replayed" for f in dataclasses.fields(answer))
    ):
        answer = dataclasses.replace(answer, replayed=True)
    return answer


__all__ = [
    "DEFAULT_URL",
    "KEY_ENV",
    "REPLAYED_HEADER",
    "URL_ENV",
    "Endpoint",
    "__version__",
    "read_answer",
]
