"""An Anthropic request as a plain conversation, the input every family renderer maps from.

Anthropic's structure (blocks inside role messages, tool results inside user messages,
consecutive same-role messages merged) is resolved here once, with the request's mistakes
reported by position, so the family adapters only map turns to their native format.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from synth_pipelines.contracts.api_errors import invalid_request
from synth_pipelines.contracts.messages import (
    CountTokensRequest,
    MessageParam,
    RedactedThinkingBlockParam,
    TextBlockParam,
    ThinkingBlockParam,
    ToolChoiceNone,
    ToolParam,
    ToolReferenceBlockParam,
    ToolResultBlockParam,
    ToolUseBlockParam,
)
from synth_pipelines.rendering.thinking_signature import thinking_text

# Text blocks of one message, and system blocks, are joined as paragraphs.
BLOCK_SEPARATOR = "\n\n"


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class SystemTurn:
    text: str


@dataclass(frozen=True)
class UserTurn:
    text: str


@dataclass(frozen=True)
class AssistantTurn:
    thinking: str
    text: str
    tool_calls: tuple[ToolCall, ...]


@dataclass(frozen=True)
class ToolResultTurn:
    tool_use_id: str
    tool_name: str
    text: str


Turn = SystemTurn | UserTurn | AssistantTurn | ToolResultTurn


@dataclass(frozen=True)
class Conversation:
    turns: tuple[Turn, ...]
    tools: tuple[ToolParam, ...]
    """Tools declared to the model: deferred tools and `tool_choice: none` leave them out."""
    thinking: bool


def conversation_from_request(request: CountTokensRequest) -> Conversation:
    builder = _TurnBuilder(tools_by_name={tool.name: tool for tool in request.tools})
    if request.system:
        builder.add_system(BLOCK_SEPARATOR.join(block.text for block in request.system))
    for index, message in enumerate(request.messages):
        builder.add_message(index, message)
    turns = builder.finish()
    declared = () if isinstance(request.tool_choice, ToolChoiceNone) else request.tools
    return Conversation(
        turns=turns,
        tools=tuple(tool for tool in declared if not tool.defer_loading),
        thinking=request.thinking_enabled,
    )


class _TurnBuilder:
    def __init__(self, tools_by_name: dict[str, ToolParam]) -> None:
        self._tools_by_name = tools_by_name
        self._turns: list[Turn] = []
        self._tool_names_by_id: dict[str, str] = {}

    def add_system(self, text: str) -> None:
        previous = self._turns[-1] if self._turns else None
        if isinstance(previous, SystemTurn):
            self._turns[-1] = SystemTurn(previous.text + BLOCK_SEPARATOR + text)
        else:
            self._turns.append(SystemTurn(text))

    def add_message(self, index: int, message: MessageParam) -> None:
        if message.role == "system":
            texts = [block.text for block in message.content if isinstance(block, TextBlockParam)]
            self.add_system(BLOCK_SEPARATOR.join(texts))
        elif message.role == "assistant":
            self._add_assistant(index, message)
        else:
            self._add_user(index, message)

    def finish(self) -> tuple[Turn, ...]:
        if isinstance(self._turns[-1], AssistantTurn):
            raise invalid_request(
                "messages: the last message is an assistant message (prefill), which this proxy "
                "does not continue; end the conversation with a user message"
            )
        if not any(isinstance(turn, UserTurn | ToolResultTurn) for turn in self._turns):
            raise invalid_request("messages: at least one user message is required")
        return tuple(self._turns)

    def _add_user(self, index: int, message: MessageParam) -> None:
        for position, block in enumerate(message.content):
            where = f"messages.{index}.content.{position}"
            if isinstance(block, TextBlockParam):
                self._add_user_text(block.text)
            elif isinstance(block, ToolResultBlockParam):
                self._turns.append(self._tool_result(where, block))
            else:
                raise invalid_request(
                    f"{where}: a {block.type} block cannot appear in a user message; "
                    "it belongs in an assistant message"
                )

    def _add_user_text(self, text: str) -> None:
        previous = self._turns[-1] if self._turns else None
        if isinstance(previous, UserTurn):
            self._turns[-1] = UserTurn(previous.text + BLOCK_SEPARATOR + text)
        else:
            self._turns.append(UserTurn(text))

    def _tool_result(self, where: str, block: ToolResultBlockParam) -> ToolResultTurn:
        tool_name = self._tool_names_by_id.get(block.tool_use_id)
        if tool_name is None:
            raise invalid_request(
                f"{where}: tool_result refers to tool_use_id {block.tool_use_id!r}, but no "
                "earlier assistant message has a tool_use block with that id; send each "
                "tool_result after the assistant message that made the call"
            )
        parts = []
        for position, item in enumerate(block.content):
            # No UnsupportedBlock gets here: validating one always fails.
            if isinstance(item, ToolReferenceBlockParam):
                parts.append(self._expand_reference(f"{where}.content.{position}", item))
            elif isinstance(item, TextBlockParam):
                parts.append(item.text)
        return ToolResultTurn(block.tool_use_id, tool_name, "\n".join(parts))

    def _expand_reference(self, where: str, reference: ToolReferenceBlockParam) -> str:
        """A tool search result names a (deferred) tool; the model reads its definition."""
        tool = self._tools_by_name.get(reference.tool_name)
        if tool is None:
            raise invalid_request(
                f"{where}: tool_reference names {reference.tool_name!r}, which is not in "
                "`tools`; declare it there (with defer_loading: true to keep it out of the "
                "initial prompt)"
            )
        definition = {
            "name": tool.name,
            "description": tool.description or "",
            "input_schema": tool.input_schema,
        }
        return json.dumps(definition, ensure_ascii=False)

    def _add_assistant(self, index: int, message: MessageParam) -> None:
        thinking: list[str] = []
        texts: list[str] = []
        calls: list[ToolCall] = []
        for position, block in enumerate(message.content):
            where = f"messages.{index}.content.{position}"
            if isinstance(block, ThinkingBlockParam):
                text = thinking_text(block.thinking, block.signature)
                if text:
                    thinking.append(text)
            elif isinstance(block, TextBlockParam):
                texts.append(block.text)
            elif isinstance(block, ToolUseBlockParam):
                calls.append(self._tool_call(where, block))
            elif not isinstance(block, RedactedThinkingBlockParam):
                raise invalid_request(
                    f"{where}: a {block.type} block cannot appear in an assistant message; "
                    "tool results belong in the next user message"
                )
        turn = AssistantTurn(
            BLOCK_SEPARATOR.join(thinking), BLOCK_SEPARATOR.join(texts), tuple(calls)
        )
        previous = self._turns[-1] if self._turns else None
        if isinstance(previous, AssistantTurn):
            turn = AssistantTurn(
                _join(previous.thinking, turn.thinking),
                _join(previous.text, turn.text),
                previous.tool_calls + turn.tool_calls,
            )
            self._turns[-1] = turn
        else:
            self._turns.append(turn)

    def _tool_call(self, where: str, block: ToolUseBlockParam) -> ToolCall:
        if block.id in self._tool_names_by_id:
            raise invalid_request(
                f"{where}: tool_use id {block.id!r} is used twice; tool_use ids must be unique"
            )
        self._tool_names_by_id[block.id] = block.name
        return ToolCall(block.id, block.name, block.input)


def _join(first: str, second: str) -> str:
    return BLOCK_SEPARATOR.join(part for part in (first, second) if part)
