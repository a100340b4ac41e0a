"""Answering from raw ASGI middleware, before or outside FastAPI's handlers."""

from __future__ import annotations

import json

from starlette.types import Send

from app.services.errors import PROBLEM_BASE


async def send_problem(send: Send, status: int, slug: str, title: str, detail: str) -> None:
    """Send a complete ``application/problem+json`` response (RFC 9457)."""
    body = json.dumps(
        {"type": PROBLEM_BASE + slug, "title": title, "status": status, "detail": detail}
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/problem+json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


__all__ = ["send_problem"]
