"""The capture proxy: Anthropic Messages in, model-native tokens out, exact evidence staged.

Every call is rendered in the model's native format by a worker process, sampled through
the tinker SDK, parsed back into Anthropic content blocks, and staged durably with the
exact prompt ids, sampled ids and sampler logprobs before its response completes. The
response and the learning record come from the same prepared prompt and sampled output.
"""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import tinker
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel

from proxy.auth import Authenticated, Caller, require_role
from proxy.capture import CaptureSink, report_to_dagster
from proxy.credentials import load_signing_key
from proxy.errors import ProxyError
from proxy.messages import (
    CountTokensResponse,
    Message,
    MessageDelta,
    MessageDeltaEvent,
    MessageDeltaUsage,
    MessageStartEvent,
    MessageStopEvent,
    PingEvent,
    Usage,
    content_block_events,
    sse_frame,
)
from proxy.metrics import ProxyMetrics
from proxy.model_registry import ModelRegistry, TinkerRoute
from proxy.prefix_cache import CacheScope
from proxy.sampler import TinkerSampler
from proxy.workers import (
    CpuWorkers,
    ErrorResult,
    Finished,
    Prepared,
    abandon,
    count,
    finish,
    prepare,
)
from synth_pipelines.contracts.interaction import Interaction
from synth_pipelines.control.database import engine_for
from synth_pipelines.evidence.publisher import EvidencePublisher
from synth_pipelines.evidence.spool import Spool
from synth_pipelines.storage.objectstore import open_object_store

PING_INTERVAL_SEC = 10.0


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
    report_to_dagster: bool = True
    s3_endpoint_url: str | None = None


@dataclass
class ProxyState:
    config: ProxyConfig
    signing_key: bytes
    workers: CpuWorkers
    sampler: TinkerSampler
    capture: CaptureSink
    metrics: ProxyMetrics
    generation: asyncio.Semaphore
    counting: asyncio.Semaphore
    call_numbers: defaultdict[tuple[str, str], itertools.count] = field(
        default_factory=lambda: defaultdict(itertools.count)
    )


def _error_response(error: ProxyError) -> JSONResponse:
    return JSONResponse(error.response().model_dump(), status_code=error.status_code)


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


class FlushResponse(BaseModel):
    published_chunks: int
    published_calls: int
    pending_calls: int


def create_app(config: ProxyConfig) -> FastAPI:
    state_holder: dict[str, ProxyState] = {}

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine = engine_for(config.database_url)
        store = open_object_store(config.objects_url, endpoint_url=config.s3_endpoint_url)
        spool = Spool(config.state_dir / "spool")
        publisher = EvidencePublisher(
            spool, store, engine, report=report_to_dagster if config.report_to_dagster else None
        )
        workers = CpuWorkers(config.registry, config.workers)
        state = ProxyState(
            config=config,
            signing_key=load_signing_key(config.signing_key_path),
            workers=workers,
            sampler=TinkerSampler(config.model_service_url, config.model_service_key),
            capture=CaptureSink(spool, publisher, config.publish_interval_sec),
            metrics=ProxyMetrics(),
            generation=asyncio.Semaphore(config.generation_limit),
            counting=asyncio.Semaphore(config.count_limit),
        )
        await workers.warm([entry.id for entry in config.registry.entries()][:1])
        state.capture.start()
        state_holder["state"] = state
        app.state.proxy = state
        try:
            yield
        finally:
            state.capture.stop()
            workers.shutdown()
            state.sampler.close()

    app = FastAPI(title="synth capture proxy", lifespan=lifespan)

    def get_state() -> ProxyState:
        return state_holder["state"]

    @app.exception_handler(ProxyError)
    async def _proxy_error(_request: Request, error: ProxyError) -> JSONResponse:
        return _error_response(error)

    @app.get("/health")
    async def health() -> dict:
        state = get_state()
        return {"status": "ok", "evidence_pending": state.capture.spool.pending()}

    @app.get("/metrics")
    async def metrics() -> Response:
        state = get_state()
        state.metrics.staged_pending.set(state.capture.spool.pending())
        state.metrics.published_calls.set(state.capture.published_calls)
        return Response(state.metrics.render(), media_type="text/plain; version=0.0.4")

    @app.get("/v1/models")
    async def models(_who: Authenticated) -> dict:
        return get_state().config.registry.model_list().model_dump()

    @app.post("/v1/messages/count_tokens")
    async def count_tokens(request: Request, _who: Authenticated) -> JSONResponse:
        state = get_state()
        body = await request.body()
        async with state.counting:
            result = await state.workers.call(state.workers.choose(None), count, body)
        if isinstance(result, ErrorResult):
            state.metrics.requests.labels("count_tokens", result.error_type).inc()
            raise result.exception()
        state.metrics.requests.labels("count_tokens", "ok").inc()
        return JSONResponse(CountTokensResponse(input_tokens=result).model_dump())

    @app.post("/internal/evidence/flush")
    async def flush(_body: FlushRequest, who: Authenticated) -> FlushResponse:
        require_role(who, "operator")
        state = get_state()
        chunks = await state.capture.flush()
        return FlushResponse(
            published_chunks=len(chunks),
            published_calls=sum(chunk.calls for chunk in chunks),
            pending_calls=state.capture.spool.pending(),
        )

    @app.post("/v1/messages")
    async def messages(request: Request, who: Authenticated) -> Response:
        state = get_state()
        started = time.perf_counter()
        body = await request.body()
        agent_id, parent_agent_id, agent_type, session = _identity(request)
        claims = who.claims
        scope = CacheScope(
            claims.owner, claims.token_id, claims.model, session or claims.attempt_id, agent_id
        )
        worker = state.workers.choose(scope)
        call_id = uuid.uuid4().hex
        prepared = await state.workers.call(worker, prepare, call_id, body, scope)
        if isinstance(prepared, ErrorResult):
            state.metrics.requests.labels("messages", prepared.error_type).inc()
            raise prepared.exception()
        try:
            who.check_model(prepared.model)
            entry = state.config.registry.get(prepared.model)
            if not isinstance(entry.backend, TinkerRoute):
                raise ProxyError("api_error", f"model {entry.id} has no tinker route")
        except ProxyError:
            await state.workers.call(worker, abandon, call_id)
            raise
        call = _Call(
            state=state,
            worker=worker,
            call_id=call_id,
            body=body,
            caller=who,
            prepared=prepared,
            route=entry.backend,
            agent=(agent_id, parent_agent_id, agent_type, session),
            started=started,
        )
        if prepared.stream:
            return StreamingResponse(
                call.stream(), media_type="text/event-stream", headers={"cache-control": "no-cache"}
            )
        message = await call.complete()
        return JSONResponse(message.model_dump(exclude_none=True))

    return app


@dataclass
class _Call:
    state: ProxyState
    worker: int
    call_id: str
    body: bytes
    caller: Caller
    prepared: Prepared
    route: TinkerRoute
    agent: tuple[str, str | None, str | None, str | None]
    started: float

    @property
    def message_id(self) -> str:
        return f"msg_{self.call_id}"

    def _params(self) -> tinker.SamplingParams:
        p = self.prepared
        return tinker.SamplingParams(
            max_tokens=p.max_tokens,
            stop=p.stop,
            temperature=p.temperature,
            top_p=p.top_p,
            top_k=p.top_k,
        )

    async def _sample_and_record(self) -> tuple[Finished, float]:
        state, metrics = self.state, self.state.metrics
        metrics.in_flight.labels("generation").inc()
        try:
            async with state.generation:
                sample_started = time.perf_counter()
                try:
                    sample = await state.sampler.sample(
                        self.route, self.prepared.prompt_tokens, self._params()
                    )
                finally:
                    sample_sec = time.perf_counter() - sample_started
            finished = await state.workers.call(
                self.worker, finish, self.call_id, sample.tokens, sample.stop_reason
            )
        except BaseException:
            await state.workers.call(self.worker, abandon, self.call_id)
            raise
        finally:
            metrics.in_flight.labels("generation").dec()
        kept = finished.output_tokens
        claims = self.caller.claims
        agent_id, parent_agent_id, agent_type, session = self.agent
        total_ms = (time.perf_counter() - self.started) * 1000
        response = self._message(finished)
        interaction = Interaction(
            call_id=self.call_id,
            run_id=claims.run_id,
            batch=claims.batch,
            attempt_id=claims.attempt_id,
            owner=claims.owner,
            role=claims.role,
            agent_id=agent_id,
            parent_agent_id=parent_agent_id,
            agent_type=agent_type,
            native_session_id=session,
            call_index=next(state.call_numbers[(claims.attempt_id, agent_id)]),
            model=self.prepared.model,
            sampler=sample.sampler,
            prompt_tokens=self.prepared.prompt_tokens,
            completion_tokens=sample.tokens[:kept],
            logprobs=sample.logprobs[:kept],
            sampler_stop_reason=sample.stop_reason,
            stop_reason=finished.stop_reason,
            parse_error=finished.malformed is not None,
            fitted=self.prepared.fitted,
            request_json=self.body.decode("utf-8", errors="replace"),
            effective_request_json=self.prepared.effective_request_json,
            response_json=response.model_dump_json(exclude_none=True),
            render_ms=self.prepared.render_ms,
            sample_ms=sample_sec * 1000,
            parse_ms=finished.parse_ms,
            total_ms=total_ms,
            created_at=datetime.now(UTC),
        )
        await state.capture.stage(interaction)
        metrics.prompt_tokens.labels(self.prepared.model).inc(len(self.prepared.prompt_tokens))
        metrics.completion_tokens.labels(self.prepared.model).inc(kept)
        metrics.reused_prefix_tokens.inc(self.prepared.reused_prefix_tokens)
        metrics.sample_latency.observe(sample_sec)
        metrics.added_latency.observe(max(0.0, time.perf_counter() - self.started - sample_sec))
        metrics.requests.labels("messages", "ok").inc()
        return finished, sample_sec

    def _message(self, finished: Finished) -> Message:
        return Message.model_validate(
            {
                "id": self.message_id,
                "content": finished.content,
                "model": self.prepared.model,
                "stop_reason": finished.stop_reason,
                "stop_sequence": finished.stop_sequence,
                "usage": {
                    "input_tokens": len(self.prepared.prompt_tokens),
                    "output_tokens": finished.output_tokens,
                },
            }
        )

    async def complete(self) -> Message:
        finished, _ = await self._sample_and_record()
        return self._message(finished)

    async def stream(self) -> AsyncIterator[bytes]:
        start = Message(
            id=self.message_id,
            content=[],
            model=self.prepared.model,
            usage=Usage(input_tokens=len(self.prepared.prompt_tokens), output_tokens=0),
        )
        yield sse_frame(MessageStartEvent(message=start))
        yield sse_frame(PingEvent())
        work = asyncio.ensure_future(self._sample_and_record())
        try:
            while True:
                done, _ = await asyncio.wait({work}, timeout=PING_INTERVAL_SEC)
                if done:
                    break
                yield sse_frame(PingEvent())
            finished, _ = work.result()
        except ProxyError as error:
            self.state.metrics.requests.labels("messages", error.error_type).inc()
            yield sse_frame(error.response())
            return
        finally:
            if not work.done():
                work.cancel()
        message = self._message(finished)
        for index, block in enumerate(message.content):
            for event in content_block_events(index, block):
                yield sse_frame(event)
        yield sse_frame(
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
        yield sse_frame(MessageStopEvent())
