"""What operators ask of the proxy: its health, its metrics, and publishing its evidence now."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import PlainTextResponse, Response
from pydantic import BaseModel

from proxy.auth import Authenticated, require_role
from proxy.openapi import error_responses
from proxy.state import State

router = APIRouter()


class FlushRequest(BaseModel):
    attempt_ids: list[str] = []
    """Only these attempts' calls (an ended attempt's, at once); empty: everything."""


class FlushResponse(BaseModel):
    published_chunks: int
    published_calls: int
    pending_calls: int


@router.get("/health")
async def health(state: State) -> dict[str, Any]:
    return {"status": "ok", "evidence_pending": state.capture.spool.pending()}


@router.get("/metrics", response_class=PlainTextResponse)
async def metrics(state: State) -> Response:
    state.metrics.staged_pending.set(state.capture.spool.pending())
    state.metrics.published_calls.set(state.capture.published_calls)
    return Response(state.metrics.render(), media_type="text/plain; version=0.0.4")


@router.post("/internal/evidence/flush", responses=error_responses(400, 401, 403))
async def flush(body: FlushRequest, who: Authenticated, state: State) -> FlushResponse:
    require_role(who, "operator")
    chunks = await state.capture.flush(frozenset(body.attempt_ids) or None)
    return FlushResponse(
        published_chunks=len(chunks),
        published_calls=sum(chunk.calls for chunk in chunks),
        pending_calls=state.capture.spool.pending(),
    )
