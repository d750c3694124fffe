"""Anthropic Messages <-> OpenAI chat completions, for a model behind a chat-completions server.

The system prompt becomes a `system` message, text blocks become message content,
`tool_use` blocks become an assistant's `tool_calls`, and each `tool_result` block becomes a
`tool` message answering its call. Thinking blocks are not sent: chat-completions servers
take no signed reasoning back. The answer's text and tool calls come back as content blocks,
with the stop reason and token usage the server reports.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from synth_pipelines.contracts.api_errors import ApiError
from synth_pipelines.contracts.messages import (
    ContentBlock,
    Message,
    MessageParam,
    MessagesRequest,
    StopReason,
    TextBlock,
    TextBlockParam,
    ToolResultBlockParam,
    ToolUseBlock,
    ToolUseBlockParam,
    Usage,
)

STOP_REASONS: dict[str, StopReason] = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "end_turn",
}
"""An OpenAI `finish_reason` -> Anthropic's `stop_reason`."""


def chat_request(request: MessagesRequest, model: str, max_tokens: int) -> dict[str, Any]:
    """The `POST /chat/completions` body asking `model` what `request` asks."""
    body: dict[str, Any] = {
        "model": model,
        "messages": chat_messages(request),
        "max_tokens": max_tokens,
        "stream": False,
    }
    if request.tools:
        body["tools"] = [tool.declaration() for tool in request.tools]
        if request.tool_choice is not None:
            body["tool_choice"] = request.tool_choice.type
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if request.top_p is not None:
        body["top_p"] = request.top_p
    if request.stop_sequences:
        body["stop"] = request.stop_sequences
    return body


def chat_messages(request: MessagesRequest) -> list[dict[str, Any]]:
    system = "\n\n".join(block.text for block in request.system)
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    for message in request.messages:
        messages.extend(_chat_turn(message))
    return messages


def _chat_turn(message: MessageParam) -> list[dict[str, Any]]:
    """One Anthropic message as chat messages: tool results first (each its own `tool`
    message, answering the previous assistant turn's calls), then the rest."""
    if message.role == "assistant":
        return [_assistant_turn(message)]
    results = [
        {"role": "tool", "tool_call_id": block.tool_use_id, "content": _result_text(block)}
        for block in message.content
        if isinstance(block, ToolResultBlockParam)
    ]
    text = _joined_text(message)
    rest = [{"role": message.role, "content": text}] if text or not results else []
    return results + rest


def _assistant_turn(message: MessageParam) -> dict[str, Any]:
    turn: dict[str, Any] = {"role": "assistant", "content": _joined_text(message) or None}
    calls = [
        {
            "id": block.id,
            "type": "function",
            "function": {"name": block.name, "arguments": json.dumps(block.input)},
        }
        for block in message.content
        if isinstance(block, ToolUseBlockParam)
    ]
    if calls:
        turn["tool_calls"] = calls
    return turn


def _joined_text(message: MessageParam) -> str:
    return "\n\n".join(block.text for block in message.content if isinstance(block, TextBlockParam))


def _result_text(block: ToolResultBlockParam) -> str:
    return "\n\n".join(part.text for part in block.content if isinstance(part, TextBlockParam))


def chat_message(response: dict[str, Any], message_id: str, model: str) -> Message:
    """A chat-completions answer as an Anthropic message named `model`."""
    try:
        choice = response["choices"][0]
        answer = choice["message"]
        finish_reason = choice.get("finish_reason") or "stop"
    except (KeyError, IndexError, TypeError):
        raise ApiError(
            "api_error",
            f"the chat-completions server answered without a choice: {json.dumps(response)[:300]}",
        ) from None
    content: list[ContentBlock] = []
    if answer.get("content"):
        content.append(TextBlock(text=answer["content"]))
    content.extend(_tool_use(call) for call in answer.get("tool_calls") or [])
    usage = response.get("usage") or {}
    stop_reason = STOP_REASONS.get(finish_reason, "end_turn")
    if stop_reason == "end_turn" and any(isinstance(b, ToolUseBlock) for b in content):
        # Some servers report `stop` for a turn that ends in tool calls.
        stop_reason = "tool_use"
    return Message(
        id=message_id,
        content=content,
        model=model,
        stop_reason=stop_reason,
        usage=Usage(
            input_tokens=int(usage.get("prompt_tokens") or 0),
            output_tokens=int(usage.get("completion_tokens") or 0),
        ),
    )


def _tool_use(call: dict[str, Any]) -> ToolUseBlock:
    function = call.get("function") or {}
    arguments = function.get("arguments") or "{}"
    try:
        parsed = json.loads(arguments) if isinstance(arguments, str) else arguments
    except json.JSONDecodeError:
        parsed = None
    if not isinstance(parsed, dict):
        raise ApiError(
            "api_error",
            f"the chat-completions server called {function.get('name')!r} with arguments "
            f"that are not a JSON object: {str(arguments)[:200]}",
        )
    call_id = call.get("id") or f"toolu_{uuid.uuid4().hex[:24]}"
    return ToolUseBlock(id=call_id, name=function.get("name") or "", input=parsed)
