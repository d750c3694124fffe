"""What the gateway is built from: given by whoever starts it."""

from __future__ import annotations

from dataclasses import dataclass

MAX_BODY_BYTES = 1 << 20
"""A control request's largest body: bulk data (task packages, exports) never passes
through the gateway, so no request needs more."""


@dataclass(frozen=True)
class GatewayConfig:
    database_url: str
    key_secret: bytes
    """The secret operators' keys are hashed under (`control/operator_keys.py`)."""
    dagster_url: str
    signing_key: bytes
    """The platform's token signing key: the gateway mints operators' session tokens."""
    proxy_url: str
    """The capture proxy sessions sample through, as operators reach it."""
    max_body_bytes: int = MAX_BODY_BYTES
    event_poll_sec: float = 0.2
    """How often a followed run's new events are looked for."""
    keepalive_sec: float = 15.0
    """How long a followed run's stream may stay silent before a comment keeps it open."""
