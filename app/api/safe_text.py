"""Strings that may be stored and shown again: no lone UTF-16 surrogates, no NUL characters.

JSON text may carry ``"\\ud800"``: Python decodes it into a ``str`` that has no UTF-8 encoding,
so it could be written to a JSON column but never rendered again (every page showing it would
fail). PostgreSQL refuses NUL (U+0000) in text and in parameters. So every string the service
stores (labels, metadata keys and values at any depth, names, descriptions, key labels,
``Idempotency-Key``) and every path or query parameter that reaches a query is checked before
anything is written, and a request carrying one is answered 422 naming the field.

* :data:`SafeText` for string fields of request bodies, :func:`check_json_tree` for free-form
  JSON (``metadata``), :data:`IdempotencyKey` for the header (given at most once:
  :func:`one_idempotency_key`).
* :func:`reject_unsafe_parameters`: an app-wide dependency over path and query parameters.
* :func:`scrub`: problem bodies that echo the request (a field name, an unknown id) always
  render. Rows stored before this check were repaired by migration 0003.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from fastapi import Header, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BeforeValidator
from pydantic_core import PydanticCustomError

_UNSAFE = re.compile("[\x00\ud800-\udfff]")
_SURROGATE = re.compile("[\ud800-\udfff]")

IDEMPOTENCY_KEY_PATTERN = r"^[\x20-\x7e]{1,200}$"
"""Printable ASCII, 1-200 characters (an RFC 8941 sf-string, as the Idempotency-Key draft)."""


def unsafe_reason(text: str) -> str | None:
    """Why ``text`` cannot be stored (None when it can)."""
    m = _UNSAFE.search(text)
    if m is None:
        return None
    if m.group() == "\x00":
        return "contains a NUL character (U+0000)"
    return f"contains a lone UTF-16 surrogate (U+{ord(m.group()):04X})"


def _segment(key: str) -> str:
    return f".{key}" if unsafe_reason(key) is None else f"[{ascii(key)}]"


def find_unsafe(value: Any, path: str) -> str | None:
    """The first unsafe string in a JSON tree (dict keys included), described with its path."""
    if isinstance(value, str):
        reason = unsafe_reason(value)
        return f"the string at {path} {reason}" if reason else None
    if isinstance(value, dict):
        for k, v in value.items():
            if isinstance(k, str) and (reason := unsafe_reason(k)) is not None:
                return f"the key {path}{_segment(k)} {reason}"
            found = find_unsafe(v, f"{path}{_segment(str(k))}")
            if found:
                return found
    elif isinstance(value, list):
        for i, v in enumerate(value):
            found = find_unsafe(v, f"{path}[{i}]")
            if found:
                return found
    return None


def _unsafe_error(message: str) -> PydanticCustomError:
    return PydanticCustomError("unsafe_string", "{message}", {"message": message})


def _check_text(value: Any) -> Any:
    if isinstance(value, str) and (reason := unsafe_reason(value)) is not None:
        raise _unsafe_error(reason)
    return value


def check_json_tree(value: Any, field: str) -> None:
    """Raise a validation error naming the first unsafe string (at any depth) under ``field``."""
    found = find_unsafe(value, field)
    if found:
        raise _unsafe_error(found)


SafeText = Annotated[str, BeforeValidator(_check_text)]
"""A string field that is stored: refuses lone surrogates and NUL with a message naming it."""

IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        pattern=IDEMPOTENCY_KEY_PATTERN,
        description=(
            "Retry-safe key, 1-200 printable ASCII characters: a request with the same key, "
            "from the same API key, on the same dataset answers the first answer."
        ),
    ),
]


def _invalid(loc: tuple[str, str], msg: str, kind: str) -> RequestValidationError:
    """A 422 about one part of the request, as FastAPI's own validation errors read."""
    return RequestValidationError([{"loc": loc, "msg": msg, "type": kind}])


def one_idempotency_key(request: Request) -> None:
    """422 when ``Idempotency-Key`` is given more than once. FastAPI reads the first value of a
    repeated header, and a proxy may fold them into one (``a, b``): the request names no one
    retry key, so it is refused rather than remembered under either. Called by every route that
    takes :data:`IdempotencyKey` (a plain call: a dependency would cost every charge a
    dependency solve)."""
    given = request.headers.getlist("idempotency-key")
    if len(given) > 1:
        raise _invalid(
            ("header", "Idempotency-Key"),
            f"given {len(given)} times; send it once (one key per request)",
            "repeated_header",
        )


def one_dry_run(request: Request) -> None:
    """422 when ``dry_run`` is given more than once. FastAPI reads the last value of a repeated
    query parameter, so ``?dry_run=true&dry_run=false`` was recorded as a charge: the request
    names no one mode, so it is refused and changes nothing, as a repeated ``Idempotency-Key``
    is (:func:`one_idempotency_key`). Called by the routes that take ``dry_run``."""
    given = request.query_params.getlist("dry_run")
    if len(given) > 1:
        raise _invalid(
            ("query", "dry_run"),
            f"given {len(given)} times; send it once (one mode per request)",
            "repeated_parameter",
        )


def no_dry_run(request: Request, instead: str) -> None:
    """422 for ``dry_run`` on a route that has no dry run (reservations, their commit and
    release). FastAPI ignores a query parameter a route does not declare, so
    ``POST .../reservations?dry_run=true`` made a real hold, charged when it expired (fail
    closed): a request asking for no effect is refused, with what to ask ``instead``."""
    if "dry_run" in request.query_params:
        raise _invalid(
            ("query", "dry_run"), f"this request has no dry run; {instead}", "unsupported_parameter"
        )


async def reject_unsafe_parameters(request: Request) -> None:
    """422 for a path or query parameter (dataset, reservation or key reference, cursor, filter)
    holding NUL or a lone surrogate, before any query sees it. ``async`` although it never
    awaits: a plain ``def`` dependency runs in the thread pool, a second thread hop on every
    request (the endpoint's is the only one)."""
    errors = []
    for name, value in request.path_params.items():
        if isinstance(value, str) and (reason := unsafe_reason(value)) is not None:
            errors.append({"loc": ("path", name), "msg": reason, "type": "unsafe_string"})
    for name, value in request.query_params.multi_items():
        reason = unsafe_reason(name) or unsafe_reason(value)
        if reason is not None:
            errors.append({"loc": ("query", scrub(name)), "msg": reason, "type": "unsafe_string"})
    if errors:
        raise RequestValidationError(errors)


def scrub(value: Any) -> Any:
    """``value`` with every lone surrogate (in strings and dict keys) replaced by U+FFFD."""
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {scrub(k): scrub(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [scrub(v) for v in value]
    return value


__all__ = [
    "IDEMPOTENCY_KEY_PATTERN",
    "IdempotencyKey",
    "SafeText",
    "check_json_tree",
    "find_unsafe",
    "no_dry_run",
    "one_dry_run",
    "one_idempotency_key",
    "reject_unsafe_parameters",
    "scrub",
    "unsafe_reason",
]
