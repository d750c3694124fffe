"""One call of a tinker-served model, prepared on a worker: completed there, answered whole
or streamed.

A streamed call's `message_start` goes out before sampling starts, and pings while the
worker samples; the rest of the message follows in one write (`proxy/message_stream.py`).
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

from proxy.message_stream import message_stream
from proxy.sampling_limits import SamplingTurn
from proxy.state import ProxyState
from proxy.worker_messages import CallRecord, ErrorResult, Finished, Prepared
from synth_pipelines.contracts.messages import Message, Usage
from synth_pipelines.contracts.scoped_token import TokenClaims
from synth_pipelines.rendering.model_registry import TinkerRoute


@dataclass
class TinkerCall:
    state: ProxyState
    worker: int
    call_id: str
    prepared: Prepared
    route: TinkerRoute
    record: CallRecord
    claims: TokenClaims
    turn: SamplingTurn
    """The call's place among its token's, charged with what it samples."""

    async def complete(self) -> Message:
        return await self.turn.sampled(self._complete)

    async def _complete(self) -> Message:
        state, metrics = self.state, self.state.metrics
        metrics.in_flight.labels("generation").inc()
        try:
            async with state.generation:
                try:
                    finished: Finished | ErrorResult = await state.workers.complete(
                        self.worker, self.call_id, self.route, self.record
                    )
                except asyncio.CancelledError:
                    state.workers.cancel(self.worker, self.call_id)
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

    def stream(self) -> AsyncIterator[bytes]:
        start = Message(
            id=f"msg_{self.call_id}",
            content=[],
            model=self.prepared.model,
            usage=Usage(input_tokens=self.prepared.prompt_tokens, output_tokens=0),
        )
        return message_stream(
            start, self.complete, functools.partial(self.state.record_stream_error, self.claims)
        )
