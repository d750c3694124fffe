"""How much one attempt may sample through the capture proxy at once, and over time.

A plan sets them (`sampling_limits`); the attempt's scoped token carries them, as it carries
the run's seed and temperature; the proxy holds each token to them (`proxy/sampling_limits.py`)
and answers 429 `rate_limit_error` with `retry-after` beyond them. A token minted without
them (an operator's, an interactive session's, one minted before they existed) is held to
these defaults.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

DEFAULT_CONCURRENT_CALLS = 8
"""Claude Code runs a few subagents and a background call or two at once; eight covers that,
and keeps one attempt to an eighth of the proxy's 64 calls sampling at a time."""
DEFAULT_SAMPLED_TOKENS_PER_SEC = 1000.0
"""Above what one attempt's calls sample on any backend the platform uses (a sequence
decodes at tens to a hundred or two tokens a second), so only a flood meets it."""


class SamplingLimits(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    concurrent_calls: int = Field(
        default=DEFAULT_CONCURRENT_CALLS,
        ge=1,
        le=1024,
        description="Messages calls one attempt may have in flight at once (from the "
        "request's arrival until its response is complete); one more is refused at once",
    )
    sampled_tokens_per_sec: float = Field(
        default=DEFAULT_SAMPLED_TOKENS_PER_SEC,
        gt=0,
        allow_inf_nan=False,
        description="the output tokens one attempt may sample per second, on average over "
        "a minute: a bucket of a minute's worth, charged with each call's output tokens once "
        "it has answered (its max_tokens if its client left before the answer); no call "
        "starts while the bucket is empty",
    )
