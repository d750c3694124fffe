"""What one scoped token may sample: calls in flight, and sampled tokens per second.

The limits are the plan's (`contracts/sampling_limits.py`), carried by the token. Before,
nothing bounded sampling per token: one attempt's 16 concurrent calls filled the model's
sampling batches, and an independent caller's one-token call took 6-14 s instead of 0.04 s.

- Calls in flight: a `messages` call holds one of its token's `concurrent_calls` places from
  its arrival until its response is complete (a stream's last event). One more is refused at
  once, 429 `rate_limit_error` with `retry-after`, rather than queued: a queue would hold
  the caller's connection and hide the limit from the harness, which already retries a 429
  after `retry-after`, as Anthropic's API asks it to.
- Sampled tokens per second: a bucket of `BUCKET_SEC` worth of `sampled_tokens_per_sec`,
  refilled continuously. A call starts only while the bucket is not empty, and is charged
  once it has answered, with the output tokens it sampled. Charging `max_tokens` up front
  would hold harnesses to what they might sample, not what they do (Claude Code asks for
  32000 on every call and samples a few hundred), and what a token's calls can cost while
  in flight is bounded by its places already. A call whose client left before the answer
  is charged its `max_tokens` (capped by the model's output limit): the model service may
  go on sampling it, and nothing tells the proxy how far. The bucket may go below empty
  by the last call's tokens; the token then waits for the refill, and `retry-after` says
  how long.

These live in the server process beside the token's other limits (`token_limits.py`).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from synth_pipelines.contracts.api_errors import ApiError
from synth_pipelines.contracts.messages import Message
from synth_pipelines.contracts.sampling_limits import SamplingLimits

BUCKET_SEC = 60.0
"""The bucket holds a minute of the token's rate: bursts up to that, an average over it."""
BUSY_RETRY_SEC = 1
"""When a token's places are all taken, when to try again: a call's end is not known."""


@dataclass
class SamplingBudget:
    """One token's sampling limits, what it has in flight and what its bucket holds."""

    limits: SamplingLimits = field(default_factory=SamplingLimits)
    in_flight: int = 0
    level: float = field(init=False)
    refilled_at: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        self.level = self.capacity

    @property
    def capacity(self) -> float:
        return self.limits.sampled_tokens_per_sec * BUCKET_SEC

    def admit(self) -> SamplingTurn:
        """A place for one call, or 429 while the token has none free or its bucket is empty."""
        limits = self.limits
        if self.in_flight >= limits.concurrent_calls:
            raise ApiError(
                "rate_limit_error",
                f"this token has {self.in_flight} sampling calls in flight, its limit is "
                f"{limits.concurrent_calls} (the plan's sampling_limits.concurrent_calls); "
                "retry once one of them has answered",
                headers={"retry-after": str(BUSY_RETRY_SEC)},
            )
        self._refill()
        if self.level <= 0:
            retry_after = max(1, math.ceil(-self.level / limits.sampled_tokens_per_sec))
            raise ApiError(
                "rate_limit_error",
                f"this token has sampled more than its {limits.sampled_tokens_per_sec:g} "
                f"tokens per second allow (the plan's sampling_limits.sampled_tokens_per_sec, "
                f"over {BUCKET_SEC:.0f} s); retry in {retry_after} s",
                headers={"retry-after": str(retry_after)},
            )
        self.in_flight += 1
        return SamplingTurn(self)

    def charge(self, tokens: int) -> None:
        self._refill()
        self.level -= tokens

    def _refill(self) -> None:
        now = time.monotonic()
        refill = (now - self.refilled_at) * self.limits.sampled_tokens_per_sec
        self.level = min(self.capacity, self.level + refill)
        self.refilled_at = now

    @property
    def idle(self) -> bool:
        """Nothing in flight and the bucket full: forgetting the token loses nothing."""
        self._refill()
        return self.in_flight == 0 and self.level >= self.capacity


@dataclass
class SamplingTurn:
    """One admitted call's place: charged once, given back once."""

    budget: SamplingBudget
    max_tokens: int = 0
    """The most the call may sample, known once it is prepared; charged if its client leaves."""
    _charged: bool = False
    _released: bool = False

    async def sampled(self, complete: Callable[[], Awaitable[Message]]) -> Message:
        """`complete()`'s message, its output tokens charged to the token's bucket."""
        try:
            message = await complete()
        except asyncio.CancelledError:
            self._charge(self.max_tokens)
            raise
        self._charge(message.usage.output_tokens)
        return message

    def _charge(self, tokens: int) -> None:
        if not self._charged:
            self._charged = True
            self.budget.charge(tokens)

    def release(self) -> None:
        if not self._released:
            self._released = True
            self.budget.in_flight -= 1
