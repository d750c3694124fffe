"""A call's work inside a worker process: render, sample, parse, stage its evidence.

A call arrives in two steps. `prepare` validates and renders the request (the session's
prefix cache makes a next turn cheap) and keeps the rendered prompt here; the server checks
the caller may use the model and sends `message_start`. `complete` then samples through the
tinker SDK, parses the completion and stages the exact prompt ids, sampled ids and sampler
logprobs durably before it answers, so the response and the learning record come from the
same prepared prompt and sampled output, and a prompt's ids never cross a process boundary.

Everything that crosses one is plain data (`proxy.worker_messages`): a request of one type
per call, dispatched here by its type (`handle`).
"""

from __future__ import annotations

import asyncio
import gc
import hashlib
import itertools
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import assert_never

import tinker

from proxy.checkpoint_models import checkpoint_lookup
from proxy.context_fit import fit_to_context
from proxy.revocations import revoked_message
from proxy.sampler import TinkerSampler
from proxy.worker_messages import (
    Abandon,
    CallRecord,
    Cancel,
    Complete,
    Count,
    ErrorResult,
    Finished,
    Freeze,
    Prepare,
    Prepared,
    WorkerRequest,
)
from synth_pipelines.contracts.api_errors import ApiError
from synth_pipelines.contracts.interaction import Interaction
from synth_pipelines.contracts.messages import (
    Message,
    MessagesRequest,
    Usage,
    parse_count_tokens_request,
    parse_messages_request,
)
from synth_pipelines.control.database import engine_for
from synth_pipelines.control.token_revocations import revocation_reason
from synth_pipelines.evidence import staged_call
from synth_pipelines.evidence.spool import Spool, StagedPrompt
from synth_pipelines.rendering.adapters.base import RenderedPrompt
from synth_pipelines.rendering.model_registry import ModelRegistry, TinkerRoute
from synth_pipelines.rendering.prefix_cache import CacheScope, PrefixCache
from synth_pipelines.rendering.thinking_signature import omit_thinking


@dataclass(frozen=True)
class WorkerConfig:
    registry_json: str
    database_url: str
    """Where recorded checkpoints are looked up, to serve them as models."""
    spool_dir: Path
    model_service_url: str | None
    model_service_key: str | None
    backend_timeout_sec: float
    cache_sessions: int = 256
    cache_tokens: int = 8_000_000


@dataclass
class _Pending:
    rendered: RenderedPrompt
    request: MessagesRequest
    effective: MessagesRequest
    params: tinker.SamplingParams
    request_json: str
    effective_request_json: str | None
    render_ms: float


@dataclass
class _WorkerState:
    database_url: str
    registry: ModelRegistry
    cache: PrefixCache
    spool: Spool
    sampler: TinkerSampler
    pending: dict[str, _Pending] = field(default_factory=dict)
    sampling: dict[str, asyncio.Task[object]] = field(default_factory=dict)
    call_numbers: defaultdict[tuple[str, str], itertools.count[int]] = field(
        default_factory=lambda: defaultdict(itertools.count)
    )


_state: _WorkerState | None = None


def init_worker(config: WorkerConfig) -> None:
    global _state
    _state = _WorkerState(
        database_url=config.database_url,
        registry=ModelRegistry.from_json(config.registry_json).with_checkpoints(
            checkpoint_lookup(config.database_url)
        ),
        cache=PrefixCache(max_sessions=config.cache_sessions, max_tokens=config.cache_tokens),
        spool=Spool(config.spool_dir),
        sampler=TinkerSampler(
            config.model_service_url, config.model_service_key, config.backend_timeout_sec
        ),
    )


def close_worker() -> None:
    """End the worker's sampling session with the model service."""
    _worker().sampler.close()


def _worker() -> _WorkerState:
    assert _state is not None, "worker used before initialization"
    return _state


def prepare(call_id: str, body: bytes, scope: CacheScope | None) -> Prepared | ErrorResult:
    started = time.perf_counter()
    state = _worker()
    try:
        request = parse_messages_request(body)
        entry = state.registry.get(request.model)
        adapter = entry.adapter()
        rendered = adapter.render(request, prefix_cache=state.cache, scope=scope)
        effective: MessagesRequest = request
        if rendered.prompt_tokens > entry.prompt_budget(request.max_tokens):
            fit = fit_to_context(request, entry, adapter, prompt_tokens=rendered.prompt_tokens)
            effective = fit.request
            rendered = adapter.render(effective)
        params = rendered.sampling_params(effective, entry.output_tokens(request.max_tokens))
    except ApiError as error:
        return ErrorResult(error.error_type, error.message)
    state.pending[call_id] = _Pending(
        rendered=rendered,
        request=request,
        effective=effective,
        params=params,
        request_json=body.decode("utf-8", errors="replace"),
        effective_request_json=effective.model_dump_json() if effective is not request else None,
        render_ms=(time.perf_counter() - started) * 1000,
    )
    return Prepared(
        model=request.model,
        stream=request.stream,
        prompt_tokens=rendered.prompt_tokens,
        reused_prefix_tokens=rendered.reused_prefix_tokens,
        max_tokens=entry.output_tokens(request.max_tokens),
    )


def call_seed(record: CallRecord, call_index: int) -> int:
    """The sampling seed of one call: the run's seed, the attempt's place in the run (its
    id without the run id, so a repeated run draws the same) and the call's index."""
    caller = record.identity
    place = caller.attempt_id.removeprefix(caller.run_id)
    key = f"{record.sampling_seed}:{place}:{caller.agent_id}:{call_index}".encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big") >> 1


async def complete(call_id: str, route: TinkerRoute, record: CallRecord) -> Finished | ErrorResult:
    """Sample, parse and stage one prepared call; the answer comes once its evidence is durable.

    The prompt part of the evidence is written while the model samples, so only the small
    completion part is left to flush afterwards. A call whose sampling fails or is cancelled
    (the client went away) leaves no evidence.
    """
    state = _worker()
    call = state.pending.pop(call_id)
    staging = asyncio.ensure_future(
        asyncio.to_thread(
            state.spool.stage_prompt,
            call_id,
            call.rendered.tokens,
            call.request_json,
            call.effective_request_json,
        )
    )
    task = asyncio.current_task()
    assert task is not None, "a call completes in a task of the worker's loop"
    state.sampling[call_id] = task
    call_index = next(state.call_numbers[(record.identity.attempt_id, record.identity.agent_id)])
    params = call.params
    if record.sampling_seed is not None:
        params = params.model_copy(update={"seed": call_seed(record, call_index)})
    if record.sampling_temperature is not None:
        params = params.model_copy(update={"temperature": record.sampling_temperature})
    sample_started = time.perf_counter()
    try:
        sample = await state.sampler.sample(route, call.rendered.tokens, params)
    except BaseException as error:
        await asyncio.to_thread(state.spool.discard, await staging)
        if isinstance(error, ApiError):
            return ErrorResult(error.error_type, error.message)
        raise
    finally:
        del state.sampling[call_id]
    sample_ms = (time.perf_counter() - sample_started) * 1000
    parse_started = time.perf_counter()
    request = call.effective
    parsed = (
        state.registry.get(request.model)
        .adapter()
        .parse(call.rendered, sample.tokens, sample.stop_reason, request.stop_sequences)
    )
    content = parsed.content
    if request.thinking_display == "omitted":
        content = omit_thinking(content)
    message = Message(
        id=f"msg_{call_id}",
        content=list(content),
        model=call.request.model,
        stop_reason=parsed.stop_reason,
        stop_sequence=parsed.stop_sequence,
        usage=Usage(input_tokens=call.rendered.prompt_tokens, output_tokens=parsed.output_tokens),
    )
    parse_ms = (time.perf_counter() - parse_started) * 1000
    kept = parsed.output_tokens
    interaction = Interaction(
        **record.identity.model_dump(),
        call_index=call_index,
        model=call.request.model,
        sampler=sample.sampler,
        temperature=params.temperature,
        prompt_tokens=call.rendered.tokens,
        completion_tokens=sample.tokens[:kept],
        logprobs=sample.logprobs[:kept],
        sampler_stop_reason=sample.stop_reason,
        stop_reason=parsed.stop_reason,
        parse_error=parsed.malformed is not None,
        fitted=call.effective is not call.request,
        request_json=call.request_json,
        effective_request_json=call.effective_request_json,
        response_json=message.model_dump_json(exclude_none=True),
        render_ms=call.render_ms,
        sample_ms=sample_ms,
        parse_ms=parse_ms,
        total_ms=(time.monotonic() - record.received) * 1000,
        created_at=datetime.now(UTC),
    )
    try:
        revoked = await asyncio.to_thread(
            _stage_unless_revoked, state, await staging, interaction, record.token_id
        )
    except OSError as error:
        return ErrorResult(
            "api_error",
            f"the proxy could not stage this call's evidence, so it is refused: {error}",
        )
    if revoked is not None:
        return ErrorResult(
            "authentication_error",
            f"{revoked_message(revoked)}; it ended while this call was in flight, so "
            "nothing of the call is recorded",
        )
    return Finished(message=message, kept_tokens=kept, sample_ms=sample_ms)


def _stage_unless_revoked(
    state: _WorkerState, staged: StagedPrompt, interaction: Interaction, token_id: str
) -> str | None:
    """Complete the call's staged evidence, unless its token was revoked meanwhile (the
    attempt ended): then discard it; returns the revocation's reason."""
    reason = revocation_reason(engine_for(state.database_url), token_id)
    if reason is not None:
        state.spool.discard(staged)
        return reason
    state.spool.stage_completion(staged, interaction)
    return None


def cancel(call_id: str) -> None:
    """The client is gone: stop a call still sampling (nothing of it is staged)."""
    task = _worker().sampling.get(call_id)
    if task is not None:
        task.cancel()


def abandon(call_id: str) -> None:
    _worker().pending.pop(call_id, None)


def count(body: bytes) -> int | ErrorResult:
    state = _worker()
    try:
        request = parse_count_tokens_request(body)
        return state.registry.get(request.model).adapter().count_tokens(request)
    except ApiError as error:
        return ErrorResult(error.error_type, error.message)


def preload(registry: ModelRegistry, family_models: list[str]) -> None:
    """Load each model's tokenizer and the evidence encoder in this process, not in a call.
    The server calls it before it forks the workers, so they start with both loaded."""
    for model in family_models:
        registry.get(model).adapter()
    # pyarrow's first conversion of Python values imports pandas (0.2-0.3 s).
    staged_call.prompt_part("warm-up", [], "", None)


def freeze() -> None:
    """Set aside from collections what the worker started with (`preload`, in the server
    before it forked the workers): it lives as long as the worker, and a full collection
    that walked it (torch, the tokenizers: about 250k objects) would stall a call by up to
    ~100 ms."""
    gc.freeze()


async def handle(request: WorkerRequest) -> Prepared | Finished | int | ErrorResult | None:
    """Answer one request from the server, by its type."""
    match request:
        case Prepare(call_id, body, scope):
            return prepare(call_id, body, scope)
        case Complete(call_id, route, record):
            return await complete(call_id, route, record)
        case Cancel(call_id):
            cancel(call_id)
        case Abandon(call_id):
            abandon(call_id)
        case Count(body):
            return count(body)
        case Freeze():
            freeze()
        case _:
            assert_never(request)
    return None
