"""What the proxy's handlers share for the server's life, and the dependency that hands it
to them."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy import Engine

from proxy.capture import CaptureSink
from proxy.config import ProxyConfig
from proxy.inference_routes import InferenceRoutes
from proxy.metrics import ProxyMetrics
from proxy.revocations import RevokedTokens
from proxy.token_limits import TokenLimits
from proxy.workers import CallWorkers
from synth_pipelines.contracts.api_errors import ApiError
from synth_pipelines.contracts.scoped_token import TokenClaims
from synth_pipelines.control.faults import record_fault
from synth_pipelines.rendering.model_registry import ModelRegistry

PLATFORM_FAULTS = frozenset(
    {"authentication_error", "permission_error", "not_found_error", "api_error", "overloaded_error"}
)
"""Refusals that are the platform's, not the harness's: recorded against the attempt, so
that an agent stopped by them is not counted as having failed its task."""


@dataclass
class ProxyState:
    config: ProxyConfig
    registry: ModelRegistry
    signing_key: bytes
    workers: CallWorkers
    capture: CaptureSink
    metrics: ProxyMetrics
    generation: asyncio.Semaphore
    counting: asyncio.Semaphore
    engine: Engine
    revocations: RevokedTokens
    limits: TokenLimits
    inference: InferenceRoutes
    """Calls to inference-only routes (not tinker), made from this process."""

    async def record_stream_error(self, claims: TokenClaims, error: ApiError) -> None:
        """An error that ends a stream: counted under its type, since the stream's 200
        went out before it, and recorded as any error is."""
        self.metrics.requests.labels("messages", error.error_type).inc()
        await self.record_fault(claims, error)

    async def record_fault(self, claims: TokenClaims | None, error: ApiError) -> None:
        """Durably, before the error response goes out: the runtime reads it once the
        harness has ended, which may be as soon as it has this response."""
        if (
            claims is None
            or claims.role == "operator"
            or error.error_type not in PLATFORM_FAULTS
            or error.callers_choice
        ):
            return
        await asyncio.to_thread(
            record_fault,
            self.engine,
            run_id=claims.run_id,
            attempt_id=claims.attempt_id,
            role=claims.role,
            status=error.status_code,
            error_type=error.error_type,
            message=error.message,
        )


# A coroutine: FastAPI runs a plain function dependency on a thread pool, a thread
# hand-off on every request.
async def proxy_state(request: Request) -> ProxyState:
    """The state the lifespan built and keeps on `app.state.proxy`."""
    state: ProxyState = request.app.state.proxy
    return state


State = Annotated[ProxyState, Depends(proxy_state)]
