"""What crosses between the server and a worker process: one request type per call, and
the plain data each answers with.

A request is dispatched in the worker by its type (`proxy.worker_calls.handle`), and the
server's typed client (`proxy.workers.CallWorkers`) names no call by string. A client
mistake or a backend failure comes back as an `ErrorResult`, never as an exception.
"""

from __future__ import annotations

from dataclasses import dataclass

from synth_pipelines.contracts.api_errors import ApiError, ErrorType
from synth_pipelines.contracts.call_identity import CallIdentity
from synth_pipelines.contracts.messages import Message
from synth_pipelines.rendering.model_registry import TinkerRoute
from synth_pipelines.rendering.prefix_cache import CacheScope


@dataclass(frozen=True)
class ErrorResult:
    error_type: ErrorType
    message: str

    def exception(self) -> ApiError:
        return ApiError(self.error_type, self.message)


@dataclass(frozen=True)
class Prepared:
    model: str
    stream: bool
    prompt_tokens: int
    reused_prefix_tokens: int
    max_tokens: int
    """The most the call may sample: its `max_tokens`, capped by the model's output limit."""


@dataclass(frozen=True)
class CallRecord:
    """Who made the call and when it reached the server, for its evidence."""

    token_id: str
    """Checked for revocation right before the call's evidence is staged."""
    identity: CallIdentity
    sampling_seed: int | None
    sampling_temperature: float | None
    received: float
    """`time.monotonic()` in the server process; CLOCK_MONOTONIC is one clock machine-wide."""


@dataclass(frozen=True)
class Finished:
    message: Message
    kept_tokens: int
    """Sampled tokens the response stands for (and the evidence keeps)."""
    sample_ms: float


@dataclass(frozen=True)
class Prepare:
    """Validate and render a Messages request, keeping its prompt in the worker;
    answered with `Prepared | ErrorResult`."""

    call_id: str
    body: bytes
    scope: CacheScope | None


@dataclass(frozen=True)
class Complete:
    """Sample, parse and stage a prepared call; answered with `Finished | ErrorResult`."""

    call_id: str
    route: TinkerRoute
    record: CallRecord


@dataclass(frozen=True)
class Cancel:
    """Stop a call still sampling (its client is gone); nobody waits for the answer."""

    call_id: str


@dataclass(frozen=True)
class Abandon:
    """Forget a prepared call that will not be completed; nobody waits for the answer."""

    call_id: str


@dataclass(frozen=True)
class Count:
    """Count a count_tokens request's tokens; answered with `int | ErrorResult`."""

    body: bytes


@dataclass(frozen=True)
class Freeze:
    """Set aside from garbage collection what the worker started with; answered with None."""


WorkerRequest = Prepare | Complete | Cancel | Abandon | Count | Freeze
