"""Calls to inference-only routes: an OpenAI-compatible chat-completions server, or an
upstream Anthropic Messages endpoint.

These run in the server process, not in a call worker: nothing is rendered or tokenized
here, the route answers text. Each call is staged as text evidence (`stage_text_call`)
before its response completes, like a tinker call's. A streamed call gets its
`message_start` at once and pings while the route answers, then the whole message.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import httpx
from sqlalchemy import Engine

from proxy.capture import stage_text_call
from proxy.chat_translation import chat_message, chat_request
from proxy.message_stream import FaultRecorder, message_stream
from proxy.revocations import revoked_message
from proxy.worker_messages import CallRecord
from synth_pipelines.contracts.api_errors import ApiError
from synth_pipelines.contracts.interaction import Interaction
from synth_pipelines.contracts.messages import (
    Message,
    MessagesRequest,
    Usage,
    parse_messages_request,
)
from synth_pipelines.evidence.spool import Spool
from synth_pipelines.rendering.model_registry import (
    AnthropicRoute,
    InferenceRoute,
    ModelEntry,
    OpenAIChatRoute,
)

ANTHROPIC_VERSION = "2023-06-01"


class InferenceRoutes:
    """The server's client for inference-only routes, and what it stages of their calls."""

    def __init__(self, spool: Spool, engine: Engine, timeout_sec: float) -> None:
        self._spool = spool
        self._engine = engine
        self._client = httpx.AsyncClient(timeout=timeout_sec)
        self._call_numbers: defaultdict[tuple[str, str], itertools.count[int]] = defaultdict(
            itertools.count
        )

    async def close(self) -> None:
        await self._client.aclose()

    async def complete(
        self, call_id: str, entry: ModelEntry, body: bytes, record: CallRecord
    ) -> Message:
        """Ask the route, stage the call's text evidence, and answer as Anthropic does."""
        route = entry.backend
        assert isinstance(route, OpenAIChatRoute | AnthropicRoute)
        request = parse_messages_request(body)
        if record.sampling_temperature is not None:
            request = request.model_copy(update={"temperature": record.sampling_temperature})
        max_tokens = entry.output_tokens(request.max_tokens)
        started = time.perf_counter()
        message = await self._ask(route, request, max_tokens, f"msg_{call_id}")
        sample_ms = (time.perf_counter() - started) * 1000
        interaction = self._interaction(route, request, body, message, record, sample_ms)
        revoked = await asyncio.to_thread(
            stage_text_call, self._spool, self._engine, interaction, record.token_id
        )
        if revoked is not None:
            raise ApiError(
                "authentication_error",
                f"{revoked_message(revoked)}; it ended while this call was in flight, so "
                "nothing of the call is recorded",
            )
        return message

    def stream(
        self,
        call_id: str,
        entry: ModelEntry,
        prompt_tokens: int,
        answer: Callable[[], Awaitable[Message]],
        on_error: FaultRecorder,
    ) -> AsyncIterator[bytes]:
        """`answer`: the call's `complete`, as its caller accounts for it."""
        start = Message(
            id=f"msg_{call_id}",
            content=[],
            model=entry.id,
            usage=Usage(input_tokens=prompt_tokens, output_tokens=0),
        )
        return message_stream(start, answer, on_error)

    async def _ask(
        self, route: InferenceRoute, request: MessagesRequest, max_tokens: int, message_id: str
    ) -> Message:
        if isinstance(route, OpenAIChatRoute):
            url = f"{route.base_url.rstrip('/')}/chat/completions"
            answer = await self._post(route, url, chat_request(request, route.model, max_tokens))
            return chat_message(answer, message_id, request.model)
        url = f"{route.base_url.rstrip('/')}/v1/messages"
        forwarded = request.model_dump(exclude_none=True, exclude_defaults=True)
        forwarded.update(model=route.model, max_tokens=max_tokens, stream=False)
        answer = await self._post(route, url, forwarded)
        try:
            upstream = Message.model_validate(answer)
        except ValueError as error:
            raise ApiError(
                "api_error", f"the Anthropic endpoint {route.base_url} answered no message: {error}"
            ) from None
        return upstream.model_copy(update={"id": message_id, "model": request.model})

    async def _post(self, route: InferenceRoute, url: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            response = await self._client.post(url, json=body, headers=_headers(route))
        except httpx.HTTPError as error:
            raise ApiError(
                "api_error", f"the {route.kind} route at {route.base_url} failed: {error!r}"
            ) from None
        if response.status_code != 200:
            raise ApiError(
                "overloaded_error" if response.status_code in (429, 503, 529) else "api_error",
                f"the {route.kind} route at {route.base_url} answered "
                f"{response.status_code}: {response.text[:300]}",
            )
        answer: dict[str, Any] = response.json()
        return answer

    def _interaction(
        self,
        route: InferenceRoute,
        request: MessagesRequest,
        body: bytes,
        message: Message,
        record: CallRecord,
        sample_ms: float,
    ) -> Interaction:
        caller = record.identity
        return Interaction(
            **caller.model_dump(),
            call_index=next(self._call_numbers[(caller.attempt_id, caller.agent_id)]),
            model=request.model,
            sampler=route.sampler,
            temperature=request.temperature if request.temperature is not None else 1.0,
            prompt_tokens=[],
            completion_tokens=[],
            logprobs=[],
            sampler_stop_reason=message.stop_reason or "end_turn",
            stop_reason=message.stop_reason or "end_turn",
            parse_error=False,
            fitted=False,
            request_json=body.decode("utf-8", errors="replace"),
            effective_request_json=None,
            response_json=message.model_dump_json(exclude_none=True),
            render_ms=0.0,
            sample_ms=sample_ms,
            parse_ms=0.0,
            total_ms=(time.monotonic() - record.received) * 1000,
            created_at=datetime.now(UTC),
        )


def _headers(route: InferenceRoute) -> dict[str, str]:
    """The route's key from the proxy's own environment (never from the caller)."""
    key = os.environ.get(route.api_key_env) if route.api_key_env else None
    if route.api_key_env and not key:
        raise ApiError(
            "api_error",
            f"the {route.kind} route at {route.base_url} needs a key in ${route.api_key_env}, "
            "which the proxy's environment does not set",
        )
    if isinstance(route, AnthropicRoute):
        headers = {"anthropic-version": ANTHROPIC_VERSION}
        if key:
            headers["x-api-key"] = key
        return headers
    return {"authorization": f"Bearer {key}"} if key else {}
