"""An operator's own harness session through the capture proxy (`synth claude`): a scoped,
revocable token the gateway mints for the key's owner and one model."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from synth_pipelines.contracts.scoped_token import AttemptScope
from synth_pipelines.contracts.stored import UtcDateTime

MAX_SESSION_SEC = 12 * 3600


class SessionRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str = Field(
        min_length=1,
        max_length=512,
        # A model's name or a checkpoint's `tinker://` path: it is looked up by URL path.
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._:/@+-]*$",
        description="A base model or a checkpoint.",
    )

    @field_validator("model")
    @classmethod
    def _no_dot_segments(cls, model: str) -> str:
        if any(segment in (".", "..") for segment in model.split("/")):
            raise ValueError("a model name has no '.' or '..' path segments")
        return model

    ttl_sec: int = Field(
        default=MAX_SESSION_SEC, ge=60, le=MAX_SESSION_SEC, description="The token's lifetime."
    )


class InteractiveSession(BaseModel):
    """The token and what the harness needs besides to use it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    token: str
    token_id: str
    scope: AttemptScope
    """What the token grants: the session's attempt, as its owner, of this model."""
    model: str
    expires_at: UtcDateTime
    proxy_url: str
    """Where the harness sends its model calls (`ANTHROPIC_BASE_URL`): the gateway's
    `/anthropic`, at the address the session was asked for at, which passes them on to
    the capture proxy."""
    context_window: int
    max_output: int
