"""Sending a response model: serialised once, by Pydantic's Rust serializer.

A route declares its ``response_model`` (the OpenAPI document shows the shape) and returns
``send(model)``: the service built and validated the model already, so FastAPI's second
validation pass and ``jsonable_encoder`` walk would only repeat the work on the hot path.
"""

from __future__ import annotations

from fastapi import Response
from pydantic import BaseModel

REPLAYED = "Idempotent-Replayed"
"""Response header set to ``true`` on the stored first answer to a retried Idempotency-Key."""


def send(model: BaseModel, status_code: int = 200) -> Response:
    """``model`` as an ``application/json`` response with ``status_code`` (and
    ``Idempotent-Replayed: true`` when it is a stored first answer, replayed)."""
    headers = {REPLAYED: "true"} if getattr(model, "_replayed", False) else None
    return Response(
        model.model_dump_json(),
        status_code=status_code,
        media_type="application/json",
        headers=headers,
    )


__all__ = ["REPLAYED", "send"]
