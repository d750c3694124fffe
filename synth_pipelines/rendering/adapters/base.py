"""What every model-family adapter takes and gives.

An adapter turns an Anthropic request into the exact prompt token ids the sampler receives
(`RenderedPrompt`), and the sampler's own tokens back into Anthropic content
(`ParsedCompletion`). Nothing here re-tokenizes sampled text: the learning record and the
response both come from `RenderedPrompt.tokens` and the sampled ids.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

import tinker
from tml_renderers.renderer import Parser

from synth_pipelines.contracts.messages import (
    ContentBlock,
    CountTokensRequest,
    MessagesRequest,
    StopReason,
)
from synth_pipelines.rendering.prefix_cache import CacheScope, PrefixCache

Family = Literal["qwen", "deepseek", "kimi", "glm"]
SamplerStopReason = Literal["stop", "length"]


@dataclass(frozen=True)
class RenderedPrompt:
    tokens: list[int]
    """Prompt token ids, exactly what is sampled and what the capture records."""
    stop_token_ids: tuple[int, ...]
    stop_strings: tuple[str, ...]
    """The family's stop tokens as text, for a sampler given the client's stop_sequences."""
    thinking: bool
    thinking_prefilled: bool
    """The prompt ends inside an open thinking section: the completion starts with thinking."""
    reused_prefix_tokens: int
    """Leading prompt tokens taken from the prefix cache instead of being tokenized."""
    parser: Parser = field(repr=False, compare=False)

    @property
    def prompt_tokens(self) -> int:
        return len(self.tokens)

    def model_input(self) -> tinker.ModelInput:
        return tinker.ModelInput.from_ints(self.tokens)

    def sampling_params(self, request: MessagesRequest, max_tokens: int) -> tinker.SamplingParams:
        """Tinker cannot mix token-id and string stops, so client stop_sequences switch the
        family's stop to its text form; `ModelAdapter.parse` cuts the completion either way."""
        stop: list[int] | list[str] = list(self.stop_token_ids)
        if request.stop_sequences:
            stop = [*self.stop_strings, *request.stop_sequences]
        return tinker.SamplingParams(
            max_tokens=max_tokens,
            stop=stop,
            temperature=1.0 if request.temperature is None else request.temperature,
            top_p=1.0 if request.top_p is None else request.top_p,
            top_k=-1 if request.top_k is None else request.top_k,
        )


@dataclass(frozen=True)
class ParsedCompletion:
    content: list[ContentBlock]
    stop_reason: StopReason
    stop_sequence: str | None
    output_tokens: int
    """How many leading sampled tokens this response stands for: the completion ends at the
    first stop token or client stop sequence, so the capture keeps exactly these tokens and
    their logprobs."""
    malformed: str | None
    """Why native output (e.g. a broken tool call) was returned as text; None when it parsed."""


class ModelAdapter(Protocol):
    """One model family's native format. An instance is safe to share between worker threads:
    it keeps no per-request state, and each `RenderedPrompt` carries its own parser (a
    tml-renderers parser must not be used by two threads at once)."""

    family: Family

    def render(
        self,
        request: CountTokensRequest,
        *,
        prefix_cache: PrefixCache | None = None,
        scope: CacheScope | None = None,
    ) -> RenderedPrompt: ...

    def count_tokens(self, request: CountTokensRequest) -> int: ...

    def count_text(self, text: str) -> int:
        """Tokens of `text` as plain content, used to estimate what shrinking it saves."""
        ...

    def parse(
        self,
        rendered: RenderedPrompt,
        completion_tokens: Sequence[int],
        sampler_stop_reason: SamplerStopReason,
        stop_sequences: Sequence[str] = (),
    ) -> ParsedCompletion: ...
