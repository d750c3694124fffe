"""CPU work of the proxy (validate, render, tokenize, parse) in worker processes.

Rendering and tokenizing hold the GIL, so they run in separate processes: the event loop
stays free for HTTP and streaming, and both cores do useful work. Each worker keeps its
own prefix cache; a session is always sent to the same worker, so its next turn finds
the cached prefix. A prepared call's renderer state stays in the worker that rendered it
until the completion is parsed there.

Everything crossing a process boundary is plain data (`Prepared`, `Finished`); a client
mistake comes back as an `ErrorResult`, never as an exception.
"""

from __future__ import annotations

import asyncio
import ctypes
import itertools
import signal
import time
import zlib
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from proxy.adapters.base import RenderedPrompt
from proxy.context_fit import fit_to_context
from proxy.errors import ProxyError
from proxy.messages import (
    MessagesRequest,
    parse_count_tokens_request,
    parse_messages_request,
)
from proxy.model_registry import ModelRegistry
from proxy.prefix_cache import CacheScope, PrefixCache
from proxy.thinking_signature import omit_thinking


@dataclass(frozen=True)
class ErrorResult:
    error_type: str
    message: str

    def exception(self) -> ProxyError:
        return ProxyError(self.error_type, self.message)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Prepared:
    model: str
    stream: bool
    prompt_tokens: list[int]
    stop: list[int] | list[str]
    max_tokens: int
    temperature: float
    top_p: float
    top_k: int
    stop_sequences: list[str]
    fitted: bool
    effective_request_json: str | None
    reused_prefix_tokens: int
    render_ms: float


@dataclass(frozen=True)
class Finished:
    content: list[dict[str, Any]]
    stop_reason: str
    stop_sequence: str | None
    output_tokens: int
    malformed: str | None
    parse_ms: float


@dataclass
class _WorkerState:
    registry: ModelRegistry
    cache: PrefixCache
    pending: dict[str, tuple[RenderedPrompt, MessagesRequest]]


_state: _WorkerState | None = None
PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """A worker process never outlives the proxy that started it, however that proxy ends.

    Forked workers inherit the server's signal handlers, which would make them ignore a
    SIGTERM sent to the process group; they get the default back, and Ctrl-C is left to
    the parent, which shuts the pool down.
    """
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _init_worker(
    registry_json: str, cache_sessions: int, cache_tokens: int, own_process: bool
) -> None:
    global _state
    if own_process:
        _die_with_parent()
    _state = _WorkerState(
        registry=ModelRegistry.from_json(registry_json),
        cache=PrefixCache(max_sessions=cache_sessions, max_tokens=cache_tokens),
        pending={},
    )


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
        max_tokens = entry.output_tokens(request.max_tokens)
        params = rendered.sampling_params(effective, max_tokens)
    except ProxyError as error:
        return ErrorResult(error.error_type, error.message)
    state.pending[call_id] = (rendered, effective)
    return Prepared(
        model=request.model,
        stream=request.stream,
        prompt_tokens=rendered.tokens,
        stop=list(params.stop or []),
        max_tokens=max_tokens,
        temperature=params.temperature,
        top_p=params.top_p,
        top_k=params.top_k,
        stop_sequences=list(request.stop_sequences),
        fitted=effective is not request,
        effective_request_json=effective.model_dump_json() if effective is not request else None,
        reused_prefix_tokens=rendered.reused_prefix_tokens,
        render_ms=(time.perf_counter() - started) * 1000,
    )


def finish(call_id: str, completion_tokens: list[int], sampler_stop_reason: str) -> Finished:
    started = time.perf_counter()
    state = _worker()
    rendered, request = state.pending.pop(call_id)
    entry = state.registry.get(request.model)
    parsed = entry.adapter().parse(
        rendered, completion_tokens, sampler_stop_reason, request.stop_sequences
    )
    content = parsed.content
    if request.thinking_display == "omitted":
        content = omit_thinking(content)
    return Finished(
        content=[block.model_dump(exclude_none=True) for block in content],
        stop_reason=parsed.stop_reason,
        stop_sequence=parsed.stop_sequence,
        output_tokens=parsed.output_tokens,
        malformed=parsed.malformed,
        parse_ms=(time.perf_counter() - started) * 1000,
    )


def abandon(call_id: str) -> None:
    _worker().pending.pop(call_id, None)


def count(body: bytes) -> int | ErrorResult:
    state = _worker()
    try:
        request = parse_count_tokens_request(body)
        return state.registry.get(request.model).adapter().count_tokens(request)
    except ProxyError as error:
        return ErrorResult(error.error_type, error.message)


def warm(family_models: list[str]) -> int:
    """Load each model's tokenizer now, so the first request does not pay for it."""
    state = _worker()
    for model in family_models:
        state.registry.get(model).adapter()
    return len(family_models)


class CpuWorkers:
    """`processes` single-process executors with session affinity (0: one thread, in process)."""

    def __init__(
        self,
        registry: ModelRegistry,
        processes: int,
        cache_sessions: int = 256,
        cache_tokens: int = 8_000_000,
    ):
        init = (registry.to_json(), cache_sessions, cache_tokens)
        self._executors: list[Executor]
        if processes > 0:
            self._executors = [
                ProcessPoolExecutor(1, initializer=_init_worker, initargs=(*init, True))
                for _ in range(processes)
            ]
        else:
            self._executors = [
                ThreadPoolExecutor(1, initializer=_init_worker, initargs=(*init, False))
            ]
        self._next = itertools.cycle(range(len(self._executors)))

    def choose(self, scope: CacheScope | None) -> int:
        if scope is None:
            return next(self._next)
        key = "\0".join((scope.owner, scope.credential, scope.model, scope.session, scope.agent))
        return zlib.crc32(key.encode()) % len(self._executors)

    async def call(self, worker: int, function, *args):
        return await asyncio.get_running_loop().run_in_executor(
            self._executors[worker], function, *args
        )

    async def warm(self, models: list[str]) -> None:
        await asyncio.gather(*(self.call(i, warm, models) for i in range(len(self._executors))))

    def shutdown(self) -> None:
        for executor in self._executors:
            executor.shutdown(wait=False, cancel_futures=True)
