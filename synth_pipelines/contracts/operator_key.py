"""An operator's API key as the gateway holds it: whose it is, what it may do, until when.

The secret itself is never stored, listed or shown again after it is created; the control
database keeps only its HMAC under the gateway's own secret (`control/operator_keys.py`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from synth_pipelines.contracts.stored import UtcDateTime

Role = Literal["viewer", "operator", "admin"]
ROLES: tuple[Role, ...] = ("viewer", "operator", "admin")
"""Each role may do what the one before it may: a viewer reads its owner's work, an
operator also submits and steers it, an admin also manages keys."""

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
LOCAL_ORG = "local"
"""The organization of the embedded default's one operator, and of runs from before
organizations were recorded."""
MAX_LIFETIME_SEC = 10 * 365 * 86400


def allows(role: Role, needed: Role) -> bool:
    """Whether a key of `role` may do what needs `needed`."""
    return ROLES.index(role) >= ROLES.index(needed)


class OperatorKey(BaseModel):
    """One key: the identity every request made with it acts as."""

    model_config = ConfigDict(extra="forbid", frozen=True, from_attributes=True)

    key_id: str
    owner: str
    org: str
    role: Role
    created_at: UtcDateTime
    expires_at: UtcDateTime | None
    revoked_at: UtcDateTime | None

    def refusal(self, now: datetime) -> str | None:
        """Why the key cannot be used at `now`, or None while it stands."""
        if self.revoked_at is not None:
            return f"API key {self.key_id} was revoked at {self.revoked_at:%Y-%m-%d %H:%M} UTC"
        if self.expires_at is not None and self.expires_at <= now:
            return f"API key {self.key_id} expired at {self.expires_at:%Y-%m-%d %H:%M} UTC"
        return None


class KeyRequest(BaseModel):
    """What an admin asks for when creating a key."""

    model_config = ConfigDict(extra="forbid")

    owner: str = Field(pattern=NAME_PATTERN, description="Who everything it creates belongs to.")
    org: str = Field(pattern=NAME_PATTERN, description="The organization whose limits it shares.")
    role: Role = "operator"
    expires_in_sec: int | None = Field(
        default=None,
        gt=0,
        le=MAX_LIFETIME_SEC,
        description="Lifetime from now, at most ten years; none: until revoked.",
    )


class CreatedKey(BaseModel):
    """A new key and its secret, shown this once."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    key: OperatorKey
    secret: str = Field(description="The whole API key to present (`SYNTH_API_KEY`).")
