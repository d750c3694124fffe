"""Sampled token ids -> Anthropic content blocks and stop reason, for every family.

The family's tml-renderers parser reads the native syntax (thinking, tool calls). This module
decides where the completion ends (first stop token, or the earliest client stop sequence in
the visible text), maps the parser's messages to Anthropic blocks, and turns output the parser
rejects into plain text with the reason recorded, so a malformed tool call never fails a call.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tml_renderers import chat, parse_errors
from tml_renderers.renderer import Parser, Renderer
from tml_renderers.tokenizers import Tokenizer

from synth_pipelines.contracts.messages import (
    ContentBlock,
    StopReason,
    TextBlock,
    ThinkingBlock,
    ToolUseBlock,
)
from synth_pipelines.rendering.adapters.base import ParsedCompletion, SamplerStopReason
from synth_pipelines.rendering.thinking_signature import sign_thinking


@dataclass(frozen=True)
class NativeSyntax:
    """The parts of a family's output syntax this module needs to know about."""

    stop_token_ids: tuple[int, ...]
    think_open: str
    think_close: str
    tool_call_open: str
    text_before_tool_calls: str
    """What the native template writes between text and the first tool call; it is not part
    of the text the model meant, so it is removed from a text block that precedes a call."""


def stop_token_ids(renderer: Renderer) -> tuple[int, ...]:
    """The token ids a family's turn ends on. tml-renderers types `stop()` for every kind of
    model (ids, strings or none); the chat families served here all stop on ids."""
    stop = renderer.stop()
    if isinstance(stop, list):
        ids = tuple(token for token in stop if isinstance(token, int))
        if ids and len(ids) == len(stop):
            return ids
    raise ValueError(
        f"{type(renderer).__name__} stops on {stop!r}, not on token ids; completions in its "
        "format cannot be cut at their end"
    )


def new_tool_use_id() -> str:
    return "toolu_" + secrets.token_hex(12)


def parse_completion(
    tokens: Sequence[int],
    sampler_stop_reason: SamplerStopReason,
    stop_sequences: Sequence[str],
    *,
    parser: Parser,
    tokenizer: Tokenizer,
    syntax: NativeSyntax,
    thinking_prefilled: bool,
) -> ParsedCompletion:
    """`thinking_prefilled`: the prompt ended inside an open thinking section."""
    kept, stopped_by_token = _cut_at_stop_token(tokens, syntax.stop_token_ids)
    stop_sequence = None
    if stop_sequences:
        cut = _cut_at_stop_sequence(kept, stop_sequences, tokenizer, syntax, thinking_prefilled)
        if cut is not None:
            kept, stop_sequence = cut
            stopped_by_token = False
    terminated = kept if stopped_by_token else [*kept, syntax.stop_token_ids[0]]
    try:
        content = _content_from_messages(parser.parse_tokens(terminated), syntax)
        malformed = _unparsed_tool_call(content, syntax)
    except ValueError as exc:
        if isinstance(getattr(exc, "kind", None), parse_errors.EmptyResponseError):
            content, malformed = [], None
        else:
            text = _visible_text(tokenizer, kept, syntax)
            content = _content_from_text(text, syntax, thinking_prefilled)
            malformed = _parse_failure(exc)
    if stop_sequence is not None:
        content = _end_before(content, stop_sequence)
    return ParsedCompletion(
        content=content,
        stop_reason=_stop_reason(
            content, sampler_stop_reason, stopped_by_token, stop_sequence is not None
        ),
        stop_sequence=stop_sequence,
        output_tokens=len(kept),
        malformed=malformed,
    )


def _cut_at_stop_token(tokens: Sequence[int], stop_ids: tuple[int, ...]) -> tuple[list[int], bool]:
    for position, token in enumerate(tokens):
        if token in stop_ids:
            return list(tokens[: position + 1]), True
    return list(tokens), False


def _cut_at_stop_sequence(
    tokens: list[int],
    stop_sequences: Sequence[str],
    tokenizer: Tokenizer,
    syntax: NativeSyntax,
    thinking_prefilled: bool,
) -> tuple[list[int], str] | None:
    """The tokens up to the one completing the earliest stop sequence outside thinking."""
    token_bytes = [
        b"" if token in syntax.stop_token_ids else tokenizer.decode_bytes([token])
        for token in tokens
    ]
    data = b"".join(token_bytes)
    close = syntax.think_close.encode()
    visible_from = 0
    if thinking_prefilled or data.lstrip().startswith(syntax.think_open.encode()):
        end_of_thinking = data.find(close)
        visible_from = len(data) if end_of_thinking < 0 else end_of_thinking + len(close)
    best: tuple[int, int, str] | None = None
    for sequence in stop_sequences:
        found = data.find(sequence.encode(), visible_from)
        if found >= 0 and (best is None or found < best[0]):
            best = (found, found + len(sequence.encode()), sequence)
    if best is None:
        return None
    consumed = 0
    for position, piece in enumerate(token_bytes):
        consumed += len(piece)
        if consumed >= best[1]:
            return tokens[: position + 1], best[2]
    return tokens, best[2]


def _content_from_messages(
    messages: list[chat.Message], syntax: NativeSyntax
) -> list[ContentBlock]:
    content: list[ContentBlock] = []
    for message in messages:
        part = message.content
        if isinstance(part, chat.Thinking) and part.text.strip():
            content.append(ThinkingBlock(thinking=part.text, signature=sign_thinking(part.text)))
        elif isinstance(part, chat.Text) and part.text.strip():
            content.append(TextBlock(text=part.text))
        elif isinstance(part, chat.InvokeTool):
            _drop_separator_before_call(content, syntax.text_before_tool_calls)
            arguments = {arg.name: _argument_value(arg.value) for arg in part.args}
            content.append(ToolUseBlock(id=new_tool_use_id(), name=part.name, input=arguments))
    return content


def _drop_separator_before_call(content: list[ContentBlock], separator: str) -> None:
    last = content[-1] if content else None
    if separator and isinstance(last, TextBlock) and last.text.endswith(separator):
        content[-1] = TextBlock(text=last.text[: -len(separator)])


def _argument_value(value: str) -> Any:
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return value


def _unparsed_tool_call(content: list[ContentBlock], syntax: NativeSyntax) -> str | None:
    for block in content:
        if isinstance(block, TextBlock) and syntax.tool_call_open in block.text:
            return f"native tool-call syntax ({syntax.tool_call_open}) left unparsed in the text"
    return None


def _visible_text(tokenizer: Tokenizer, tokens: list[int], syntax: NativeSyntax) -> str:
    body = [token for token in tokens if token not in syntax.stop_token_ids]
    return tokenizer.decode(body)


def _content_from_text(
    text: str, syntax: NativeSyntax, thinking_prefilled: bool
) -> list[ContentBlock]:
    """Output the parser rejected: thinking split off where it is unambiguous, the rest text."""
    thinking = ""
    stripped = text.lstrip()
    if thinking_prefilled or stripped.startswith(syntax.think_open):
        body = stripped.removeprefix(syntax.think_open) if not thinking_prefilled else text
        thinking, closed, rest = body.partition(syntax.think_close)
        text = rest if closed else ""
    content: list[ContentBlock] = []
    if thinking.strip():
        thinking = thinking.strip()
        content.append(ThinkingBlock(thinking=thinking, signature=sign_thinking(thinking)))
    if text.strip():
        content.append(TextBlock(text=text.strip()))
    return content


def _parse_failure(exc: ValueError) -> str:
    kind = getattr(exc, "kind", None)
    first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return f"{kind!r}: {first_line}" if kind is not None else first_line


def _end_before(content: list[ContentBlock], stop_sequence: str) -> list[ContentBlock]:
    """Anthropic's text ends before the stop sequence; the cut tokens may reach past it."""
    for index in range(len(content) - 1, -1, -1):
        block = content[index]
        if isinstance(block, TextBlock) and stop_sequence in block.text:
            kept = block.text[: block.text.rfind(stop_sequence)]
            head = content[:index]
            return [*head, TextBlock(text=kept)] if kept else head
    return content


def _stop_reason(
    content: list[ContentBlock],
    sampler_stop_reason: SamplerStopReason,
    stopped_by_token: bool,
    stopped_by_sequence: bool,
) -> StopReason:
    if stopped_by_sequence:
        return "stop_sequence"
    if sampler_stop_reason == "length" and not stopped_by_token:
        return "max_tokens"
    if any(isinstance(block, ToolUseBlock) for block in content):
        return "tool_use"
    return "end_turn"
