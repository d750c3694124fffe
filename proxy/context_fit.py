"""Fitting an oversized prompt into the model's context by shrinking bulky observations.

The budget is the context window minus the output tokens the call will sample (`max_tokens`,
capped by the model's output limit). When the rendered prompt is over it, tool_result text and
expanded skill content (the text sent beside a `Skill` tool's result) are cut to their head
and tail around an explicit omission marker. Passes keep 16,000, then 4,000, then 1,000
characters per block, oldest block first, and stop as soon as the prompt fits. Fixed keep
sizes make the cuts depend only on the conversation, so a later turn cuts its history the same
way and the rendered prefix stays stable. What was cut is returned for the capture record;
a prompt that cannot fit is an `invalid_request_error`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from synth_pipelines.contracts.api_errors import invalid_request
from synth_pipelines.contracts.messages import (
    MessagesRequest,
    TextBlockParam,
    ToolResultBlockParam,
    ToolUseBlockParam,
)
from synth_pipelines.rendering.adapters.base import ModelAdapter
from synth_pipelines.rendering.model_registry import ModelEntry

KEEP_CHARACTERS = (16_000, 4_000, 1_000)
SKILL_TOOL_NAME = "Skill"
_HEAD_SHARE = 2 / 3


def omission_marker(omitted_characters: int) -> str:
    return (
        f"\n[... {omitted_characters} characters omitted by the proxy to fit the model's "
        "context ...]\n"
    )


@dataclass(frozen=True)
class Omission:
    message_index: int
    block_index: int
    content_index: int | None
    """Position inside a tool_result's content; None for a text block of the message."""
    kind: Literal["tool_result", "skill_content"]
    original_characters: int
    kept_characters: int


@dataclass(frozen=True)
class FitResult:
    request: MessagesRequest
    """The effective request: the input itself when it fit, else a shrunk copy."""
    prompt_tokens: int
    budget: int
    omissions: tuple[Omission, ...]


@dataclass
class _Candidate:
    message_index: int
    block_index: int
    content_index: int | None
    kind: Literal["tool_result", "skill_content"]
    block: TextBlockParam
    original: str


def fit_to_context(
    request: MessagesRequest,
    entry: ModelEntry,
    adapter: ModelAdapter,
    prompt_tokens: int | None = None,
) -> FitResult:
    """`prompt_tokens`: the request's rendered length when the caller already rendered it."""
    budget = entry.prompt_budget(request.max_tokens)
    tokens = adapter.count_tokens(request) if prompt_tokens is None else prompt_tokens
    if tokens <= budget:
        return FitResult(request, tokens, budget, ())
    original_tokens = tokens
    fitted = request.model_copy(deep=True)
    candidates = _shrinkable_text(fitted)
    omissions: dict[int, Omission] = {}
    for keep in KEEP_CHARACTERS:
        for number, candidate in enumerate(candidates):
            current = candidate.block.text
            shrunk = _head_and_tail(candidate.original, keep)
            if len(shrunk) >= len(current):
                continue
            candidate.block.text = shrunk
            tokens -= adapter.count_text(current) - adapter.count_text(shrunk)
            omissions[number] = Omission(
                candidate.message_index,
                candidate.block_index,
                candidate.content_index,
                candidate.kind,
                len(candidate.original),
                keep,
            )
            if tokens <= budget:
                tokens = adapter.count_tokens(fitted)
                if tokens <= budget:
                    return FitResult(fitted, tokens, budget, tuple(omissions.values()))
    tokens = adapter.count_tokens(fitted)
    if tokens <= budget:
        return FitResult(fitted, tokens, budget, tuple(omissions.values()))
    raise invalid_request(
        f"prompt is too long: {original_tokens} tokens > {budget} maximum (model {entry.id}: "
        f"context window {entry.context_window} minus {entry.output_tokens(request.max_tokens)} "
        f"output tokens); cutting tool results and skill content to {KEEP_CHARACTERS[-1]} "
        f"characters each still leaves {tokens} tokens. Start a new conversation or shorten "
        "the system prompt and tools."
    )


def _shrinkable_text(request: MessagesRequest) -> list[_Candidate]:
    """Tool-result text and skill content, oldest first."""
    tool_names: dict[str, str] = {}
    candidates: list[_Candidate] = []
    for message_index, message in enumerate(request.messages):
        if message.role == "assistant":
            for block in message.content:
                if isinstance(block, ToolUseBlockParam):
                    tool_names[block.id] = block.name
            continue
        if message.role != "user":
            continue
        skill_result = any(
            isinstance(block, ToolResultBlockParam)
            and tool_names.get(block.tool_use_id) == SKILL_TOOL_NAME
            for block in message.content
        )
        for block_index, block in enumerate(message.content):
            if isinstance(block, ToolResultBlockParam):
                for content_index, item in enumerate(block.content):
                    if isinstance(item, TextBlockParam):
                        candidates.append(
                            _Candidate(
                                message_index,
                                block_index,
                                content_index,
                                "tool_result",
                                item,
                                item.text,
                            )
                        )
            elif isinstance(block, TextBlockParam) and skill_result:
                candidates.append(
                    _Candidate(message_index, block_index, None, "skill_content", block, block.text)
                )
    return candidates


def _head_and_tail(text: str, keep: int) -> str:
    """`keep` characters of `text` (two thirds from the start, the rest from the end)."""
    if len(text) <= keep:
        return text
    head = int(keep * _HEAD_SHARE)
    tail = keep - head
    return text[:head] + omission_marker(len(text) - keep) + text[len(text) - tail :]
