"""An Anthropic Messages stream of a message that is answered whole.

`message_start` and a ping go out before the answer is asked for, a ping every
PING_INTERVAL_SEC while it is awaited (so no client's read timeout fires during a long
sample), then the rest of the message in one write; an API error ends the stream with
its error event.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

from synth_pipelines.contracts.api_errors import ApiError
from synth_pipelines.contracts.messages import (
    Message,
    MessageDelta,
    MessageDeltaEvent,
    MessageDeltaUsage,
    MessageStartEvent,
    MessageStopEvent,
    PingEvent,
    StreamEvent,
    content_block_events,
    sse_frame,
)

PING_INTERVAL_SEC = 10.0

FaultRecorder = Callable[[ApiError], Awaitable[None]]


def _closing_events(message: Message) -> list[StreamEvent]:
    events = [
        event
        for index, block in enumerate(message.content)
        for event in content_block_events(index, block)
    ]
    delta = MessageDelta(stop_reason=message.stop_reason, stop_sequence=message.stop_sequence)
    usage = MessageDeltaUsage(
        output_tokens=message.usage.output_tokens, input_tokens=message.usage.input_tokens
    )
    events.extend([MessageDeltaEvent(delta=delta, usage=usage), MessageStopEvent()])
    return events


async def message_stream(
    start: Message, complete: Callable[[], Awaitable[Message]], on_error: FaultRecorder
) -> AsyncIterator[bytes]:
    yield sse_frame(MessageStartEvent(message=start))
    yield sse_frame(PingEvent())
    work = asyncio.ensure_future(complete())
    try:
        while True:
            done, _ = await asyncio.wait({work}, timeout=PING_INTERVAL_SEC)
            if done:
                break
            yield sse_frame(PingEvent())
        message = work.result()
    except ApiError as error:
        await on_error(error)
        yield sse_frame(error.response())
        return
    finally:
        if not work.done():
            work.cancel()
    yield b"".join(sse_frame(event) for event in _closing_events(message))
