"""What one scoped token may ask of the proxy, so that no attempt can starve the others.

Every caller shares the workers that render, tokenize and count, so each token (each
attempt) is held to limits taken from its model's context window:

- a request body of at most `BODY_BYTES_PER_CONTEXT_TOKEN` bytes per token of context
  (and at least `MIN_BODY_BYTES`): past it the request is refused unread, 413
  `request_too_large`. A conversation that large could not fit the model even after
  the proxy drops its oldest turns; before, any token could send 8 MB (4.2M tokens
  counted in 5 s);
- at most `WINDOW_CONTEXTS` context windows' worth of tokens tokenized in any
  `WINDOW_SEC` (those `count_tokens` counts, and the new prompt tokens of `messages`:
  a prefix the worker has cached is not tokenized again), then 429 `rate_limit_error`
  with `retry-after`;
- `COUNTS_IN_FLIGHT` token counts and `PREPARES_IN_FLIGHT` message preparations at a
  time; more wait for their turn (holding a connection, not a worker), so a burst
  from one token queues behind itself instead of in front of everyone;
- what it samples: calls in flight and sampled tokens per second, the plan's limits
  that the token carries (`sampling_limits.py`), then 429 `rate_limit_error` with
  `retry-after`.

Limits live in the server process, per token id, for as long as the token is used.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from proxy.sampling_limits import SamplingBudget
from synth_pipelines.contracts.api_errors import ApiError
from synth_pipelines.contracts.sampling_limits import SamplingLimits
from synth_pipelines.contracts.scoped_token import TokenClaims
from synth_pipelines.rendering.model_registry import ModelRegistry

BODY_BYTES_PER_CONTEXT_TOKEN = 16
"""A token of text is ~4 bytes; JSON escaping and tool-call structure at most double
that; and the proxy fits a conversation up to about twice its model's context."""
MIN_BODY_BYTES = 1 << 20
WINDOW_SEC = 60.0
WINDOW_CONTEXTS = 64
COUNTS_IN_FLIGHT = 1
PREPARES_IN_FLIGHT = 4
REMEMBERED_TOKENS = 4096
"""Tokens whose allowances are kept; past that, idle ones are forgotten first."""


@dataclass
class Allowance:
    """One token's limits and what it has used of them."""

    model: str
    context_window: int
    _counts: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(COUNTS_IN_FLIGHT))
    _prepares: asyncio.Semaphore = field(
        default_factory=lambda: asyncio.Semaphore(PREPARES_IN_FLIGHT)
    )
    spent: deque[tuple[float, int]] = field(default_factory=deque)
    sampling: SamplingBudget = field(default_factory=SamplingBudget)
    last_used: float = field(default_factory=time.monotonic)
    in_flight: int = 0

    def counting(self) -> contextlib.AbstractAsyncContextManager[None]:
        """This token's turn to have tokens counted."""
        return self._turn(self._counts)

    def preparing(self) -> contextlib.AbstractAsyncContextManager[None]:
        """This token's turn to have a message rendered and tokenized."""
        return self._turn(self._prepares)

    @contextlib.asynccontextmanager
    async def _turn(self, semaphore: asyncio.Semaphore) -> AsyncIterator[None]:
        self.in_flight += 1
        try:
            async with semaphore:
                yield
        finally:
            self.in_flight -= 1
            self.last_used = time.monotonic()

    @property
    def body_bytes(self) -> int:
        return max(MIN_BODY_BYTES, self.context_window * BODY_BYTES_PER_CONTEXT_TOKEN)

    @property
    def window_tokens(self) -> int:
        return self.context_window * WINDOW_CONTEXTS

    def body_too_large(self, size: str) -> ApiError:
        return ApiError(
            "request_too_large",
            f"request body is {size} bytes, over this token's limit of {self.body_bytes} "
            f"bytes ({BODY_BYTES_PER_CONTEXT_TOKEN} per token of {self.model}'s "
            f"{self.context_window}-token context); shorten the conversation or the tool "
            "results",
        )

    def check(self) -> None:
        """Refuse (429) while this token has used up its window."""
        now = time.monotonic()
        self.last_used = now
        while self.spent and self.spent[0][0] <= now - WINDOW_SEC:
            self.spent.popleft()
        used = sum(tokens for _, tokens in self.spent)
        if used >= self.window_tokens:
            retry_after = max(1, int(self.spent[0][0] + WINDOW_SEC - now) + 1)
            raise ApiError(
                "rate_limit_error",
                f"this token had {used} tokens tokenized in the last {WINDOW_SEC:.0f} s, "
                f"its limit is {self.window_tokens} ({WINDOW_CONTEXTS} times {self.model}'s "
                f"context); retry in {retry_after} s",
                headers={"retry-after": str(retry_after)},
            )

    def charge(self, tokens: int) -> None:
        self.spent.append((time.monotonic(), tokens))

    @property
    def idle(self) -> bool:
        quiet = self.in_flight == 0 and time.monotonic() - self.last_used > WINDOW_SEC
        return quiet and self.sampling.idle


class TokenLimits:
    def __init__(self, registry: ModelRegistry):
        self.registry = registry
        self._allowances: dict[str, Allowance] = {}

    async def allowance(self, claims: TokenClaims) -> Allowance:
        found = self._allowances.get(claims.token_id)
        if found is not None:
            return found
        context = await asyncio.to_thread(self._context, claims.model)
        # The token's other first calls may have made it while this one looked up the model:
        # one allowance per token, or a burst of first calls would each get a fresh one.
        found = self._allowances.get(claims.token_id)
        if found is None:
            found = Allowance(
                claims.model,
                context,
                sampling=SamplingBudget(claims.sampling_limits or SamplingLimits()),
            )
            if len(self._allowances) >= REMEMBERED_TOKENS:
                self._forget_idle()
            self._allowances[claims.token_id] = found
        return found

    def _context(self, model: str) -> int:
        """The token's model's context window (a checkpoint's is its base model's); for a
        model this proxy does not serve, the largest it does: its calls fail anyway."""
        try:
            return self.registry.get(model).context_window
        except ApiError:
            return max(entry.context_window for entry in self.registry.entries())

    def _forget_idle(self) -> None:
        for token_id in [key for key, allowance in self._allowances.items() if allowance.idle]:
            del self._allowances[token_id]
