"""Sending a response model: serialised once, by Pydantic's Rust serializer.

A route declares its ``response_model`` (the OpenAPI document shows the shape) and returns
``send(model)``: the service built and validated the model already, so FastAPI's second
validation pass and ``jsonable_encoder`` walk would only repeat the work on the hot path.
"""

from __future__ import annotations

from fastapi import Response
from pydantic import BaseModel


def send(model: BaseModel, status_code: int = 200) -> Response:
    """``model`` as an ``application/json`` response with ``status_code``."""
    return Response(model.model_dump_json(), status_code=status_code, media_type="application/json")


__all__ = ["send"]
