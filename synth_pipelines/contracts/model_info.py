"""What the capture proxy says of a model it serves (`GET /v1/models/{id}`): read by the
runtime, before a run is accepted and when an attempt learns its model's limits."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel


class ModelInfo(BaseModel):
    """An entry of `GET /v1/models`, in Anthropic's shape."""

    type: Literal["model"] = "model"
    id: str
    display_name: str
    created_at: str = "1970-01-01T00:00:00Z"
    lifecycle: Literal["active"] = "active"
    max_input_tokens: int
    max_tokens: int
    # Beyond Anthropic's fields (its clients ignore them): what serves the model, and
    # whether the platform can train it.
    family: str
    route: str
    base_model: str | None
    trainable: bool
