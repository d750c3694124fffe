"""One call of a tinker-served model, prepared on a worker: completed there, answered whole
or streamed.

A streamed call's `message_start` goes out before sampling starts, and pings while the
worker samples; the rest of the message follows in one write.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

from proxy.state import ProxyState
from proxy.worker_messages import CallRecord, ErrorResult, Finished, Prepared
from synth_pipelines.contracts.api_errors import ApiError
from synth_pipelines.contracts.messages import (
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
from synth_pipelines.contracts.scoped_token import TokenClaims
from synth_pipelines.rendering.model_registry import TinkerRoute

PING_INTERVAL_SEC = 10.0


@dataclass
class TinkerCall:
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
