"""What every request of one gateway process shares: its configuration and the engine."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import httpx
from fastapi import Depends, Request
from sqlalchemy import Engine

from gateway.config import GatewayConfig
from gateway.event_feeds import EventFeeds
from gateway.export_jobs import ExportSlots
from gateway.shared_reads import SharedReads
from synth_pipelines.storage.objectstore import ObjectStore


@dataclass(frozen=True)
class GatewayState:
    config: GatewayConfig
    engine: Engine
    store: ObjectStore
    """The runs' evidence: read to answer for a run, never streamed through here."""
    dagster: httpx.AsyncClient
    """Pooled connections to the Dagster webserver (`routes/dagster.py`)."""
    model_calls: httpx.AsyncClient
    """Pooled connections to the capture proxy (`routes/model_calls.py`)."""
    event_feeds: EventFeeds
    """One reader of each followed run's events (`event_feeds.py`)."""
    exports: ExportSlots
    """The processes that build runs' exports (`export_jobs.py`)."""
    shared_reads: SharedReads
    """Polls of a run's results that arrive together, read once (`shared_reads.py`)."""


async def gateway_state(request: Request) -> GatewayState:
    """The state the lifespan built and keeps on `app.state.gateway` (on the event loop: it
    reads an attribute, where a plain function would cost a hop to the thread pool)."""
    state: GatewayState = request.app.state.gateway
    return state


State = Annotated[GatewayState, Depends(gateway_state)]
