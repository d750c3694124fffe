"""The capture proxy: Anthropic Messages in, model-native tokens out, exact evidence staged.

Every call is rendered in the model's native format, sampled through the tinker SDK,
parsed back into Anthropic content blocks, and staged durably with the exact prompt ids,
sampled ids and sampler logprobs before its response completes, all by a worker process
(`proxy.worker_calls`); this process authenticates, streams and publishes the evidence.
A streamed call's `message_start` goes out before sampling starts. The response and the
learning record come from the same prepared prompt and sampled output.
"""

from __future__ import annotations

import asyncio
import gc
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from pydantic import BaseModel
from sqlalchemy import Engine
from starlette.exceptions import HTTPException

from proxy import worker_calls
from proxy.auth import Authenticated, require_role
from proxy.capture import CaptureSink, DagsterReporter
from proxy.checkpoint_models import checkpoint_lookup
from proxy.inference_routes import InferenceRoutes
from proxy.metrics import ProxyMetrics
from proxy.openapi import error_responses, install_openapi, json_request_body
from proxy.request_body import json_body
from proxy.revocations import RevokedTokens
from proxy.sandbox_listener import SandboxListenerGate
from proxy.token_limits import TokenLimits
from proxy.worker_calls import CallRecord, ErrorResult, Finished, Prepared, WorkerConfig
from proxy.workers import CallWorkers
from synth_pipelines.contracts.api_errors import (
    ApiError,
    ErrorDetail,
    ErrorResponse,
    ErrorType,
    field_path,
)
from synth_pipelines.contracts.messages import (
    CountTokensRequest,
    CountTokensResponse,
    Message,
    MessageDelta,
    MessageDeltaEvent,
    MessageDeltaUsage,
    MessagesRequest,
    MessageStartEvent,
    MessageStopEvent,
    PingEvent,
    Usage,
    content_block_events,
    sse_frame,
)
from synth_pipelines.contracts.scoped_token import TokenClaims
from synth_pipelines.control.database import engine_for
from synth_pipelines.control.faults import record_fault
from synth_pipelines.credentials import load_signing_key
from synth_pipelines.evidence.publisher import EvidencePublisher
from synth_pipelines.evidence.spool import Spool
from synth_pipelines.rendering.model_registry import ModelEntry, ModelRegistry, TinkerRoute
from synth_pipelines.rendering.prefix_cache import CacheScope
from synth_pipelines.storage.objectstore import open_object_store

PING_INTERVAL_SEC = 10.0
PLATFORM_FAULTS = frozenset(
    {"authentication_error", "permission_error", "not_found_error", "api_error", "overloaded_error"}
)
"""Refusals that are the platform's, not the harness's: recorded against the attempt, so
that an agent stopped by them is not counted as having failed its task."""


@dataclass(frozen=True)
class ProxyConfig:
    state_dir: Path
    signing_key_path: Path
    database_url: str
    objects_url: str
    model_service_url: str | None
    model_service_key: str | None
    registry: ModelRegistry = field(default_factory=ModelRegistry)
    workers: int = 2
    generation_limit: int = 64
    count_limit: int = 16
    publish_interval_sec: float = 1.0
    evidence_settle_sec: float = 10.0
    """An attempt's staged calls are published once it has staged none for this long, so a
    chunk holds many turns of a conversation (a flush publishes everything at once)."""
    report_to_dagster: bool = True
    s3_endpoint_url: str | None = None
    backend_timeout_sec: float = 600.0
    """A model backend that completes no request for this long fails the calls waiting on
    it (a harness gives up on a call after about as long)."""


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

    async def record_fault(self, claims: TokenClaims | None, error: ApiError) -> None:
        """Durably, before the error response goes out: the runtime reads it once the
        harness has ended, which may be as soon as it has this response."""
        if claims is None or claims.role == "operator" or error.error_type not in PLATFORM_FAULTS:
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


def _error_response(error: ApiError) -> JSONResponse:
    return JSONResponse(
        error.response().model_dump(), status_code=error.status_code, headers=error.headers
    )


def _http_error_type(status_code: int) -> ErrorType:
    if status_code == 404:
        return "not_found_error"
    if status_code == 413:
        return "request_too_large"
    return "invalid_request_error"


_MESSAGE_RESPONSES = {
    200: {
        "model": Message,
        "description": "The message; with `stream: true`, Anthropic's server-sent events",
        "content": {"text/event-stream": {"schema": {"type": "string"}}},
    },
    **error_responses(400, 401, 403, 404, 413, 429, 500, 529),
}


def _identity(request: Request) -> tuple[str, str | None, str | None, str | None]:
    """(agent id, parent agent id, agent type, native session) from the harness's headers."""
    headers = request.headers
    return (
        headers.get("x-claude-code-agent-id") or "main",
        headers.get("x-claude-code-parent-agent-id"),
        headers.get("x-claude-code-agent-type"),
        headers.get("x-claude-code-session-id"),
    )


class FlushRequest(BaseModel):
    attempt_ids: list[str] = []
    """Only these attempts' calls (an ended attempt's, at once); empty: everything."""


class FlushResponse(BaseModel):
    published_chunks: int
    published_calls: int
    pending_calls: int


def create_app(config: ProxyConfig) -> FastAPI:
    state_holder: dict[str, ProxyState] = {}

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        spool = Spool(config.state_dir / "spool")
        # No worker runs yet, so an incomplete staged call is one whose response never
        # completed (the proxy stopped while sampling it).
        spool.discard_incomplete()
        # Before the workers fork: they inherit the engine (and the tables exist by then).
        engine = engine_for(config.database_url)
        workers = CallWorkers(
            WorkerConfig(
                registry_json=config.registry.to_json(),
                database_url=config.database_url,
                spool_dir=spool.root,
                model_service_url=config.model_service_url,
                model_service_key=config.model_service_key,
                backend_timeout_sec=config.backend_timeout_sec,
            ),
            config.workers,
        )
        worker_calls.preload(config.registry, [entry.id for entry in config.registry.entries()][:1])
        await workers.start()
        warming = asyncio.ensure_future(workers.freeze())
        store = open_object_store(config.objects_url, endpoint_url=config.s3_endpoint_url)
        reporter = DagsterReporter() if config.report_to_dagster else None
        publisher = EvidencePublisher(
            spool,
            store,
            engine,
            report=reporter,
            settle_sec=config.evidence_settle_sec,
        )
        registry = config.registry.with_checkpoints(checkpoint_lookup(config.database_url))
        state = ProxyState(
            config=config,
            registry=registry,
            signing_key=load_signing_key(config.signing_key_path),
            workers=workers,
            capture=CaptureSink(spool, publisher, config.publish_interval_sec),
            metrics=ProxyMetrics(),
            generation=asyncio.Semaphore(config.generation_limit),
            counting=asyncio.Semaphore(config.count_limit),
            engine=engine,
            revocations=RevokedTokens(engine),
            limits=TokenLimits(registry),
            inference=InferenceRoutes(spool, engine, config.backend_timeout_sec),
        )
        try:
            await warming
            await asyncio.to_thread(state.revocations.refresh)
        except BaseException:
            await workers.shutdown()
            raise
        following = asyncio.create_task(state.revocations.follow())
        state.capture.start()
        # Everything loaded so far lives as long as the server; full collections skip it.
        gc.freeze()
        state_holder["state"] = state
        app.state.proxy = state
        try:
            yield
        finally:
            following.cancel()
            state.capture.stop()
            await workers.shutdown()
            await state.inference.close()
            if reporter is not None:
                reporter.close()

    app = FastAPI(title="synth capture proxy", lifespan=lifespan)

    def get_state() -> ProxyState:
        return state_holder["state"]

    @app.exception_handler(ApiError)
    async def _proxy_error(request: Request, error: ApiError) -> JSONResponse:
        await get_state().record_fault(getattr(request.state, "claims", None), error)
        return _error_response(error)

    @app.exception_handler(RequestValidationError)
    async def _invalid_body(_request: Request, error: RequestValidationError) -> JSONResponse:
        problem = error.errors()[0]
        detail = f"{field_path(tuple(problem['loc'][1:]))}: {problem['msg']}"
        return _error_response(ApiError("invalid_request_error", detail))

    @app.exception_handler(HTTPException)
    async def _http_error(request: Request, error: HTTPException) -> JSONResponse:
        # Starlette's own refusals (no such route, wrong method) in Anthropic's shape.
        message = f"{request.method} {request.url.path}: {error.detail}"
        body = ErrorResponse(
            error=ErrorDetail(type=_http_error_type(error.status_code), message=message)
        )
        return JSONResponse(body.model_dump(), status_code=error.status_code, headers=error.headers)

    @app.get("/health")
    async def health() -> dict:
        state = get_state()
        return {"status": "ok", "evidence_pending": state.capture.spool.pending()}

    @app.get("/metrics", response_class=PlainTextResponse)
    async def metrics() -> Response:
        state = get_state()
        state.metrics.staged_pending.set(state.capture.spool.pending())
        state.metrics.published_calls.set(state.capture.published_calls)
        return Response(state.metrics.render(), media_type="text/plain; version=0.0.4")

    @app.get("/v1/models", responses=error_responses(401))
    async def models(_who: Authenticated) -> dict:
        return get_state().registry.model_list().model_dump()

    @app.get("/v1/models/{model_id:path}", responses=error_responses(401, 403, 404))
    async def model(model_id: str, who: Authenticated) -> dict:
        registry = get_state().registry
        who.check_checkpoint_owner(model_id, registry.checkpoint(model_id))
        return registry.get(model_id).model_info().model_dump()

    @app.post(
        "/v1/messages/count_tokens",
        response_model=CountTokensResponse,
        responses=error_responses(400, 401, 404, 413, 429),
        openapi_extra=json_request_body(CountTokensRequest),
    )
    async def count_tokens(request: Request, who: Authenticated) -> JSONResponse:
        state = get_state()
        allowance = await state.limits.allowance(who.claims)
        async with allowance.counting():
            allowance.check()
            body = await json_body(request, allowance.body_bytes, allowance.body_too_large)
            async with state.counting:
                result = await state.workers.call(state.workers.choose(None), "count", body)
            if not isinstance(result, ErrorResult):
                allowance.charge(result)
        if isinstance(result, ErrorResult):
            state.metrics.requests.labels("count_tokens", result.error_type).inc()
            raise result.exception()
        state.metrics.requests.labels("count_tokens", "ok").inc()
        return JSONResponse(CountTokensResponse(input_tokens=result).model_dump())

    @app.post("/internal/evidence/flush", responses=error_responses(400, 401, 403))
    async def flush(body: FlushRequest, who: Authenticated) -> FlushResponse:
        require_role(who, "operator")
        state = get_state()
        chunks = await state.capture.flush(frozenset(body.attempt_ids) or None)
        return FlushResponse(
            published_chunks=len(chunks),
            published_calls=sum(chunk.calls for chunk in chunks),
            pending_calls=state.capture.spool.pending(),
        )

    @app.post(
        "/v1/messages",
        response_model=Message,
        responses=_MESSAGE_RESPONSES,
        openapi_extra=json_request_body(MessagesRequest),
    )
    async def messages(request: Request, who: Authenticated) -> Response:
        state = get_state()
        received = time.monotonic()
        claims = who.claims
        allowance = await state.limits.allowance(claims)
        agent_id, parent_agent_id, agent_type, session = _identity(request)
        scope = CacheScope(
            claims.owner, claims.token_id, claims.model, session or claims.attempt_id, agent_id
        )
        worker = state.workers.choose(scope)
        call_id = uuid.uuid4().hex
        async with allowance.preparing():
            allowance.check()
            body = await json_body(request, allowance.body_bytes, allowance.body_too_large)
            prepared = await state.workers.call(worker, "prepare", call_id, body, scope)
            if not isinstance(prepared, ErrorResult):
                allowance.charge(prepared.prompt_tokens - prepared.reused_prefix_tokens)
        if isinstance(prepared, ErrorResult):
            state.metrics.requests.labels("messages", prepared.error_type).inc()
            raise prepared.exception()
        try:
            who.check_model(prepared.model)
            entry = state.registry.get(prepared.model)
            checkpoint = state.registry.checkpoint(prepared.model)
            if checkpoint is not None and checkpoint.owner != who.claims.owner:
                raise ApiError(
                    "permission_error",
                    f"checkpoint {prepared.model} belongs to another owner",
                )
        except ApiError:
            state.workers.tell(worker, "abandon", call_id)
            raise
        record = CallRecord(
            token_id=claims.token_id,
            run_id=claims.run_id,
            batch=claims.batch,
            attempt_id=claims.attempt_id,
            trial_id=claims.trial_id,
            owner=claims.owner,
            role=claims.role,
            agent_id=agent_id,
            parent_agent_id=parent_agent_id,
            agent_type=agent_type,
            native_session_id=session,
            sampling_seed=claims.sampling_seed,
            sampling_temperature=claims.sampling_temperature,
            received=received,
        )
        if not isinstance(entry.backend, TinkerRoute):
            # The worker rendered the prompt only to count it; the route answers text.
            state.workers.tell(worker, "abandon", call_id)
            return await _inference_response(state, call_id, entry, body, prepared, record, claims)
        call = _Call(state, worker, call_id, prepared, entry.backend, record, claims)
        if prepared.stream:
            return StreamingResponse(
                call.stream(), media_type="text/event-stream", headers={"cache-control": "no-cache"}
            )
        message = await call.complete()
        return JSONResponse(message.model_dump(exclude_none=True))

    install_openapi(app, [MessagesRequest, CountTokensRequest])
    app.add_middleware(SandboxListenerGate)
    return app


async def _inference_response(
    state: ProxyState,
    call_id: str,
    entry: ModelEntry,
    body: bytes,
    prepared: Prepared,
    record: CallRecord,
    claims: TokenClaims,
) -> Response:
    async def on_error(error: ApiError) -> None:
        state.metrics.requests.labels("messages", error.error_type).inc()
        await state.record_fault(claims, error)

    if prepared.stream:
        events = state.inference.stream(
            call_id, entry, body, record, prepared.prompt_tokens, on_error
        )
        return StreamingResponse(
            events, media_type="text/event-stream", headers={"cache-control": "no-cache"}
        )
    message = await state.inference.complete(call_id, entry, body, record)
    state.metrics.requests.labels("messages", "ok").inc()
    return JSONResponse(message.model_dump(exclude_none=True))


@dataclass
class _Call:
    state: ProxyState
    worker: int
    call_id: str
    prepared: Prepared
    route: TinkerRoute
    record: CallRecord
    claims: TokenClaims

    async def complete(self) -> Message:
        state, metrics = self.state, self.state.metrics
        metrics.in_flight.labels("generation").inc()
        try:
            async with state.generation:
                try:
                    finished: Finished | ErrorResult = await state.workers.call(
                        self.worker, "complete", self.call_id, self.route, self.record
                    )
                except asyncio.CancelledError:
                    state.workers.tell(self.worker, "cancel", self.call_id)
                    raise
        finally:
            metrics.in_flight.labels("generation").dec()
        if isinstance(finished, ErrorResult):
            raise finished.exception()
        model = self.prepared.model
        metrics.prompt_tokens.labels(model).inc(self.prepared.prompt_tokens)
        metrics.completion_tokens.labels(model).inc(finished.kept_tokens)
        metrics.reused_prefix_tokens.inc(self.prepared.reused_prefix_tokens)
        metrics.sample_latency.observe(finished.sample_ms / 1000)
        total_sec = time.monotonic() - self.record.received
        metrics.added_latency.observe(max(0.0, total_sec - finished.sample_ms / 1000))
        metrics.requests.labels("messages", "ok").inc()
        return finished.message

    async def stream(self) -> AsyncIterator[bytes]:
        start = Message(
            id=f"msg_{self.call_id}",
            content=[],
            model=self.prepared.model,
            usage=Usage(input_tokens=self.prepared.prompt_tokens, output_tokens=0),
        )
        yield sse_frame(MessageStartEvent(message=start))
        yield sse_frame(PingEvent())
        work = asyncio.ensure_future(self.complete())
        try:
            while True:
                done, _ = await asyncio.wait({work}, timeout=PING_INTERVAL_SEC)
                if done:
                    break
                yield sse_frame(PingEvent())
            message = work.result()
        except ApiError as error:
            self.state.metrics.requests.labels("messages", error.error_type).inc()
            await self.state.record_fault(self.claims, error)
            yield sse_frame(error.response())
            return
        finally:
            if not work.done():
                work.cancel()
        # The sampler answers whole, so the rest of the stream goes out in one write.
        events = [
            event
            for index, block in enumerate(message.content)
            for event in content_block_events(index, block)
        ]
        events.append(
            MessageDeltaEvent(
                delta=MessageDelta(
                    stop_reason=message.stop_reason, stop_sequence=message.stop_sequence
                ),
                usage=MessageDeltaUsage(
                    output_tokens=message.usage.output_tokens,
                    input_tokens=message.usage.input_tokens,
                ),
            )
        )
        events.append(MessageStopEvent())
        yield b"".join(sse_frame(event) for event in events)
