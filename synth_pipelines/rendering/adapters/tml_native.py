"""Families rendered whole by a tml-renderers native renderer (DeepSeek, Kimi, GLM).

The mapping from a `Conversation` to `tml_renderers.chat` messages lives here once; each
family module says how its tools are declared, how its tool calls are identified, and which
renderer serves which thinking mode. tml-renderers renders and tokenizes in one native call,
so these families have no rendered text to compare and do not use the prefix cache.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from tml_renderers import chat
from tml_renderers.renderer import Renderer
from tml_renderers.tokenizers import Tokenizer

from synth_pipelines.contracts.api_errors import invalid_request
from synth_pipelines.contracts.messages import CountTokensRequest, ToolParam
from synth_pipelines.rendering.adapters.base import (
    Family,
    ParsedCompletion,
    RenderedPrompt,
    SamplerStopReason,
)
from synth_pipelines.rendering.adapters.completion import NativeSyntax, parse_completion
from synth_pipelines.rendering.adapters.conversation import (
    AssistantTurn,
    Conversation,
    SystemTurn,
    ToolCall,
    ToolResultTurn,
    UserTurn,
    conversation_from_request,
)
from synth_pipelines.rendering.prefix_cache import CacheScope, PrefixCache

NativeToolId = Callable[[int, ToolCall], str]
"""(position of the call in the conversation, call) -> the id the native format renders."""


@dataclass(frozen=True)
class NativeFormat:
    family: Family
    syntax: NativeSyntax
    system_tools_text: Callable[[tuple[ToolParam, ...]], str] | None = None
    """Families without a tool-declaration message describe their tools in the system text."""
    native_tool_id: NativeToolId = lambda _position, call: call.id


class NativeRenderer(Renderer, Protocol):
    """A tml-renderers renderer as its concrete classes declare it: their tokenizers are
    `tokenizers.Tokenizer`, which decodes bytes (the package's `Renderer` protocol promises
    only text), as parsing a completion needs."""

    @property
    def tokenizer(self) -> Tokenizer: ...


def _encoded_text(span: chat.TokenSpan) -> chat.EncodedTextTokenSpan:
    # A conversation is text only, so it renders to encoded text alone.
    assert isinstance(span.span, chat.EncodedTextTokenSpan), f"a text prompt rendered {span!r}"
    return span.span


class TmlNativeAdapter:
    """A family adapter over tml-renderers renderers, one per thinking mode."""

    def __init__(
        self, native: NativeFormat, renderer: NativeRenderer, thinking_renderer: NativeRenderer
    ):
        self.family: Family = native.family
        self._native = native
        self._renderer = renderer
        self._thinking_renderer = thinking_renderer
        self._tokenizer = renderer.tokenizer
        self._stop_ids = native.syntax.stop_token_ids
        self._stop_strings = tuple(self._tokenizer.decode([token]) for token in self._stop_ids)

    def render(
        self,
        request: CountTokensRequest,
        *,
        prefix_cache: PrefixCache | None = None,
        scope: CacheScope | None = None,
    ) -> RenderedPrompt:
        conversation = conversation_from_request(request)
        renderer = self._thinking_renderer if conversation.thinking else self._renderer
        try:
            spans, parser = renderer.render_for_completion(self.chat_messages(conversation))
        except ValueError as exc:
            raise invalid_request(
                f"the conversation cannot be rendered in the {self.family} chat format: {exc}"
            ) from None
        tokens = self.adjust_tokens(
            [token for span in spans for token in _encoded_text(span).tokens]
        )
        tail = self._tokenizer.decode(tokens[-8:])
        return RenderedPrompt(
            tokens=tokens,
            stop_token_ids=self._stop_ids,
            stop_strings=self._stop_strings,
            thinking=conversation.thinking,
            thinking_prefilled=tail.endswith(self._native.syntax.think_open),
            reused_prefix_tokens=0,
            parser=parser,
        )

    def adjust_tokens(self, tokens: list[int]) -> list[int]:
        """Where a family's renderer departs from its official template, the fix goes here."""
        return tokens

    def count_tokens(self, request: CountTokensRequest) -> int:
        return self.render(request).prompt_tokens

    def count_text(self, text: str) -> int:
        return len(self._tokenizer.encode_ordinary(text))

    def parse(
        self,
        rendered: RenderedPrompt,
        completion_tokens: Sequence[int],
        sampler_stop_reason: SamplerStopReason,
        stop_sequences: Sequence[str] = (),
    ) -> ParsedCompletion:
        return parse_completion(
            completion_tokens,
            sampler_stop_reason,
            stop_sequences,
            parser=rendered.parser,
            tokenizer=self._tokenizer,
            syntax=self._native.syntax,
            thinking_prefilled=rendered.thinking_prefilled,
        )

    def chat_messages(self, conversation: Conversation) -> list[chat.Message]:
        native = self._native
        messages: list[chat.Message] = []
        turns = list(conversation.turns)
        if conversation.tools and native.system_tools_text is None:
            declaration = _tool_declaration(conversation.tools)
            messages.append(_message(declaration, chat.AuthorKind.System, "tool_declare"))
        elif conversation.tools and native.system_tools_text is not None:
            tools_text = native.system_tools_text(conversation.tools)
            if turns and isinstance(turns[0], SystemTurn):
                turns[0] = SystemTurn(turns[0].text + tools_text)
            else:
                turns.insert(0, SystemTurn(tools_text))
        native_ids: dict[str, str] = {}
        for turn in turns:
            if isinstance(turn, SystemTurn):
                messages.append(_message(chat.Text(turn.text), chat.AuthorKind.System))
            elif isinstance(turn, UserTurn):
                messages.append(_message(chat.Text(turn.text), chat.AuthorKind.User))
            elif isinstance(turn, AssistantTurn):
                messages.extend(self._assistant_messages(turn, native_ids))
            else:
                messages.append(_tool_result_message(turn, native_ids))
        return messages

    def _assistant_messages(
        self, turn: AssistantTurn, native_ids: dict[str, str]
    ) -> list[chat.Message]:
        parts: list[chat.Content] = []
        if turn.thinking:
            parts.append(chat.Thinking(turn.thinking))
        if turn.text:
            parts.append(chat.Text(turn.text))
        for call in turn.tool_calls:
            native_id = self._native.native_tool_id(len(native_ids), call)
            native_ids[call.id] = native_id
            arguments = [
                chat.ToolArg(name, json.dumps(value, ensure_ascii=False))
                for name, value in call.arguments.items()
            ]
            parts.append(
                chat.InvokeTool(
                    chat.StructuredToolCall(call.name, arguments, tool_call_id=native_id)
                )
            )
        if not parts:
            return []
        return [_message(part, chat.AuthorKind.Model) for part in [*parts, chat.ModelEndSampling()]]


def _message(content: chat.Content, kind: chat.AuthorKind, name: str | None = None) -> chat.Message:
    return chat.Message(content, chat.Author(kind, name))


def _tool_declaration(tools: tuple[ToolParam, ...]) -> chat.ToolDeclareJson:
    specs = [
        chat.ToolSpecJson("function", tool.name, tool.description or "", tool.input_schema)
        for tool in tools
    ]
    return chat.ToolDeclareJson(specs)


def _tool_result_message(turn: ToolResultTurn, native_ids: dict[str, str]) -> chat.Message:
    metadata = chat.MessageMetadata(tool_call_id=native_ids[turn.tool_use_id])
    author = chat.Author(chat.AuthorKind.Tool, turn.tool_name)
    return chat.Message(chat.Text(turn.text), author, message_metadata=metadata)
