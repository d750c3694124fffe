"""POST /v1/messages and /v1/messages/count_tokens: Anthropic Messages, served in each
model's native format.

A worker renders (and counts) every call; a tinker-served model's call is then sampled and
staged by the same worker (`proxy.tinker_call`), an inference-only route's is answered from
this process (`proxy.inference_routes`).
"""

from __future__ import annotations

import functools
import time
import uuid
from collections.abc import AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from proxy.auth import Authenticated, Caller
from proxy.openapi import error_responses, json_request_body
from proxy.request_body import json_body
from proxy.sampling_limits import SamplingTurn
from proxy.state import ProxyState, State
from proxy.tinker_call import TinkerCall
from proxy.token_limits import Allowance
from proxy.worker_messages import CallRecord, ErrorResult, Prepared
from synth_pipelines.contracts.api_errors import ApiError
from synth_pipelines.contracts.call_identity import CallIdentity
from synth_pipelines.contracts.messages import (
    CountTokensRequest,
    CountTokensResponse,
    Message,
    MessagesRequest,
)
from synth_pipelines.contracts.scoped_token import TokenClaims
from synth_pipelines.rendering.model_registry import ModelEntry, TinkerRoute
from synth_pipelines.rendering.prefix_cache import CacheScope

router = APIRouter()

_MESSAGE_RESPONSES = {
    200: {
        "model": Message,
        "description": "The message; with `stream: true`, Anthropic's server-sent events",
        "content": {"text/event-stream": {"schema": {"type": "string"}}},
    },
    **error_responses(400, 401, 403, 404, 413, 429, 500, 529),
}


@router.post(
    "/v1/messages/count_tokens",
    response_model=CountTokensResponse,
    responses=error_responses(400, 401, 404, 413, 429),
    openapi_extra=json_request_body(CountTokensRequest),
)
async def count_tokens(request: Request, who: Authenticated, state: State) -> JSONResponse:
    allowance = await state.limits.allowance(who.claims)
    async with allowance.counting():
        allowance.check()
        body = await json_body(request, allowance.body_bytes, allowance.body_too_large)
        async with state.counting:
            result = await state.workers.count(state.workers.choose(None), body)
        if not isinstance(result, ErrorResult):
            allowance.charge(result)
    if isinstance(result, ErrorResult):
        state.metrics.requests.labels("count_tokens", result.error_type).inc()
        raise result.exception()
    state.metrics.requests.labels("count_tokens", "ok").inc()
    return JSONResponse(CountTokensResponse(input_tokens=result).model_dump())


@router.post(
    "/v1/messages",
    response_model=Message,
    responses=_MESSAGE_RESPONSES,
    openapi_extra=json_request_body(MessagesRequest),
)
async def messages(request: Request, who: Authenticated, state: State) -> Response:
    received = time.monotonic()
    allowance = await state.limits.allowance(who.claims)
    # Refused here, before the body is read, while the token has no place free.
    turn = allowance.sampling.admit()
    try:
        response = await _answer(request, who, state, allowance, turn, received)
    except BaseException:
        turn.release()
        raise
    if not isinstance(response, _TurnStream):
        turn.release()
    return response


class _TurnStream(StreamingResponse):
    """A streamed answer that gives its call's place back once it has been sent, however
    sending it ends (a client that leaves mid-stream included)."""

    def __init__(self, events: AsyncIterator[bytes], turn: SamplingTurn) -> None:
        super().__init__(events, media_type="text/event-stream", headers=_STREAM_HEADERS)
        self._turn = turn

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._turn.release()


_STREAM_HEADERS = {"cache-control": "no-cache"}


async def _answer(
    request: Request,
    who: Caller,
    state: ProxyState,
    allowance: Allowance,
    turn: SamplingTurn,
    received: float,
) -> Response:
    claims = who.claims
    call_id = uuid.uuid4().hex
    identity = _identity(call_id, claims, request)
    scope = CacheScope(
        claims.owner,
        claims.token_id,
        claims.model,
        identity.native_session_id or claims.attempt_id,
        identity.agent_id,
    )
    worker = state.workers.choose(scope)
    async with allowance.preparing():
        allowance.check()
        body = await json_body(request, allowance.body_bytes, allowance.body_too_large)
        prepared = await state.workers.prepare(worker, call_id, body, scope)
        if not isinstance(prepared, ErrorResult):
            allowance.charge(prepared.prompt_tokens - prepared.reused_prefix_tokens)
    if isinstance(prepared, ErrorResult):
        state.metrics.requests.labels("messages", prepared.error_type).inc()
        raise prepared.exception()
    turn.max_tokens = prepared.max_tokens
    try:
        who.check_model(prepared.model)
        entry = state.registry.get(prepared.model)
        who.check_checkpoint_owner(state.registry, prepared.model)
    except ApiError:
        state.workers.abandon(worker, call_id)
        raise
    record = CallRecord(
        token_id=claims.token_id,
        identity=identity,
        sampling_seed=claims.sampling_seed,
        sampling_temperature=claims.sampling_temperature,
        received=received,
    )
    if not isinstance(entry.backend, TinkerRoute):
        # The worker rendered the prompt only to count it; the route answers text.
        state.workers.abandon(worker, call_id)
        return await _inference_response(
            state, call_id, entry, body, prepared, record, claims, turn
        )
    call = TinkerCall(state, worker, call_id, prepared, entry.backend, record, claims, turn)
    if prepared.stream:
        return _TurnStream(call.stream(), turn)
    message = await call.complete()
    return JSONResponse(message.model_dump(exclude_none=True))


def _identity(call_id: str, claims: TokenClaims, request: Request) -> CallIdentity:
    """Who makes the call: the attempt its token was minted for, and the agent and native
    session the harness's headers name."""
    headers = request.headers
    return CallIdentity(
        call_id=call_id,
        run_id=claims.run_id,
        batch=claims.batch,
        attempt_id=claims.attempt_id,
        trial_id=claims.trial_id,
        owner=claims.owner,
        role=claims.role,
        agent_id=headers.get("x-claude-code-agent-id") or "main",
        parent_agent_id=headers.get("x-claude-code-parent-agent-id"),
        agent_type=headers.get("x-claude-code-agent-type"),
        native_session_id=headers.get("x-claude-code-session-id"),
    )


async def _inference_response(
    state: ProxyState,
    call_id: str,
    entry: ModelEntry,
    body: bytes,
    prepared: Prepared,
    record: CallRecord,
    claims: TokenClaims,
    turn: SamplingTurn,
) -> Response:
    answer = functools.partial(
        turn.sampled, functools.partial(state.inference.complete, call_id, entry, body, record)
    )
    if prepared.stream:
        on_error = functools.partial(state.record_stream_error, claims)
        events = state.inference.stream(call_id, entry, prepared.prompt_tokens, answer, on_error)
        return _TurnStream(events, turn)
    message = await answer()
    state.metrics.requests.labels("messages", "ok").inc()
    return JSONResponse(message.model_dump(exclude_none=True))
