"""Answering from raw ASGI middleware, before or outside FastAPI's handlers."""

from __future__ import annotations

import json

from starlette.types import Send

from app.errors import problem_body


async def send_problem(send: Send, status: int, slug: str, title: str, detail: str) -> None:
    """Send a complete ``application/problem+json`` response (RFC 9457)."""
    body = json.dumps(problem_body(status, detail, slug=slug, title=title)).encode()
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
