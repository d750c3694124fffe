"""What every request of one gateway process shares: its configuration and the engine."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy import Engine

from gateway.config import GatewayConfig


@dataclass(frozen=True)
class GatewayState:
    config: GatewayConfig
    engine: Engine


def gateway_state(request: Request) -> GatewayState:
    """The state the lifespan built and keeps on `app.state.gateway`."""
    state: GatewayState = request.app.state.gateway
    return state


State = Annotated[GatewayState, Depends(gateway_state)]
