"""The Anthropic Messages shapes: what is accepted, ignored, rejected, and how errors read."""

from __future__ import annotations

import json

import anthropic.types
import pytest
from claude_code_requests import first_request, tool_result_request
from pydantic import TypeAdapter, ValidationError

from synth_pipelines.contracts.api_errors import ApiError, validation_error_response
from synth_pipelines.contracts.messages import (
    IGNORED_FIELDS,
    REJECTED_FIELDS,
    ContentBlockDeltaEvent,
    ContentBlockStartEvent,
    Message,
    MessagesRequest,
    TextBlock,
    TextBlockParam,
    ThinkingAdaptive,
    ThinkingBlock,
    ToolResultBlockParam,
    ToolUseBlock,
    Usage,
    content_block_events,
    parse_count_tokens_request,
    parse_messages_request,
    sse_frame,
)


def _body(**changes: object) -> bytes:
    base: dict[str, object] = {
        "model": "synth/qwen3-tiny",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "hi"}],
    }
    base.update(changes)
    return json.dumps(base).encode()


def _refusal(body: bytes) -> ApiError:
    with pytest.raises(ApiError) as caught:
        parse_messages_request(body)
    assert caught.value.error_type == "invalid_request_error"
    assert caught.value.status_code == 400
    return caught.value


def test_claude_code_default_first_request_is_accepted_whole() -> None:
    body = first_request()
    request = parse_messages_request(json.dumps(body).encode())

    assert [block.text[:20] for block in request.system] == [
        "x-anthropic-billing-",
        "You are a Claude age",
        "You are an interacti",
    ]
    assert request.system[1].cache_control is not None
    assert [message.role for message in request.messages] == ["user", "system"]
    assert len(request.tools) == 12
    assert [tool.name for tool in request.tools if tool.defer_loading] == [
        "DeferredToolPlaceholder"
    ]
    assert request.tools[1].input_schema["$schema"].startswith("https://json-schema.org/")
    assert isinstance(request.thinking, ThinkingAdaptive)
    assert request.thinking_enabled and request.thinking_display == "omitted"
    assert request.context_management == body["context_management"]
    assert request.output_config is not None and request.output_config.effort == "high"
    assert request.stream is True and request.max_tokens == 32000


def test_tool_result_turn_keeps_is_error_cache_control_and_string_system_message() -> None:
    request = parse_messages_request(json.dumps(tool_result_request()).encode())

    system_message = request.messages[1]
    assert system_message.role == "system"
    assert isinstance(system_message.content[0], TextBlockParam)
    result = request.messages[3].content[0]
    assert isinstance(result, ToolResultBlockParam)
    assert result.is_error is False and result.cache_control is not None
    assert result.content == [TextBlockParam(type="text", text="(Bash completed with no output)")]


def test_every_ignored_top_level_field_is_accepted() -> None:
    values = {
        "cache_control": {"type": "ephemeral"},
        "context_management": {"edits": []},
        "metadata": {"user_id": "u-1"},
        "service_tier": "auto",
        "speed": "standard",
        "inference_geo": "us",
        "diagnostics": {"previous_message_id": "msg_1"},
        "user_profile_id": "p-1",
        "workspace_id": "w-1",
    }
    assert {name for name in IGNORED_FIELDS if name.isidentifier()} == set(values)

    request = parse_messages_request(_body(**values))

    assert request.metadata is not None and request.metadata.user_id == "u-1"


def test_unknown_field_is_rejected_by_name() -> None:
    error = _refusal(_body(frobnicate=True))

    assert error.message.startswith("frobnicate: Extra inputs are not permitted")


def test_unknown_field_inside_a_block_is_rejected_with_its_path() -> None:
    messages = [{"role": "user", "content": [{"type": "text", "text": "hi", "colour": "red"}]}]

    error = _refusal(_body(messages=messages))

    assert error.message.startswith("messages.0.content.0.colour: Extra inputs")


def test_image_block_is_rejected_as_text_only() -> None:
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "x"}}
    messages = [{"role": "user", "content": [{"type": "text", "text": "look"}, image]}]

    error = _refusal(_body(messages=messages))

    assert error.message.startswith("messages.0.content.1: content block type 'image'")
    assert "text-only" in error.message


def test_image_inside_a_tool_result_is_rejected() -> None:
    result = {
        "type": "tool_result",
        "tool_use_id": "toolu_1",
        "content": [{"type": "image", "source": {}}],
    }
    messages = [{"role": "user", "content": [result]}]

    error = _refusal(_body(messages=messages))

    assert "messages.0.content.0.content.0" in error.message and "'image'" in error.message


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"tool_choice": {"type": "any"}}, "tool_choice: tool_choice type 'any' is not supported"),
        (
            {"tool_choice": {"type": "tool", "name": "Bash"}},
            "tool_choice: tool_choice type 'tool' is not supported",
        ),
        (
            {"tools": [{"type": "web_search_20250305", "name": "web_search"}]},
            "tools: tools.0: server tool type 'web_search_20250305' is not supported",
        ),
        (
            {"output_config": {"format": {"type": "json_schema", "schema": {}}}},
            "output_config.format: structured output formats are not supported",
        ),
        ({"container": "container_1"}, "container: container is not supported"),
        ({"mcp_servers": [{"type": "url"}]}, "mcp_servers: mcp_servers is not supported"),
        (
            {"thinking": {"type": "enabled", "budget_tokens": 100}},
            "thinking.budget_tokens: Input should be greater than or equal to 1024 (got 100)",
        ),
        ({"max_tokens": 0}, "max_tokens: Input should be greater than or equal to 1 (got 0)"),
        ({"temperature": 1.5}, "temperature: Input should be less than or equal to 1 (got 1.5)"),
        ({"messages": []}, "messages: at least one message is required"),
    ],
)
def test_fields_that_cannot_be_honored_are_rejected_clearly(
    changes: dict[str, object], expected: str
) -> None:
    assert _refusal(_body(**changes)).message.startswith(expected)


def test_rejected_fields_are_documented() -> None:
    assert {"container", "mcp_servers", "output_config.format"} <= set(REJECTED_FIELDS)


def test_missing_required_field_names_it() -> None:
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()

    assert _refusal(body).message == "max_tokens: Field required"


def test_non_json_body_is_a_clear_400() -> None:
    error = _refusal(b"{not json")

    assert error.message.startswith("request body is not valid JSON")


def test_validation_error_becomes_anthropic_error_body() -> None:
    with pytest.raises(ValidationError) as caught:
        MessagesRequest.model_validate({"model": "m", "messages": [], "max_tokens": "many"})

    body = validation_error_response(caught.value).model_dump()

    assert body["type"] == "error"
    assert body["error"]["type"] == "invalid_request_error"
    assert "(and 1 more problem)" in body["error"]["message"]
    anthropic.types.ErrorResponse.model_validate(body)


def test_count_tokens_request_refuses_max_tokens() -> None:
    with pytest.raises(ApiError) as caught:
        parse_count_tokens_request(_body())

    assert caught.value.message.startswith("max_tokens: Extra inputs are not permitted")


def test_response_message_matches_the_anthropic_sdk_model() -> None:
    message = Message(
        id="msg_1",
        model="synth/qwen3-tiny",
        content=[
            ThinkingBlock(thinking="plan", signature="sig"),
            TextBlock(text="Running."),
            ToolUseBlock(id="toolu_1", name="Bash", input={"command": "ls"}),
        ],
        stop_reason="tool_use",
        usage=Usage(input_tokens=10, output_tokens=5),
    )

    parsed = anthropic.types.Message.model_validate(message.model_dump())

    assert [block.type for block in parsed.content] == ["thinking", "text", "tool_use"]
    assert parsed.stop_reason == "tool_use"


def test_stream_events_of_each_block_parse_as_sdk_events() -> None:
    sdk_event = TypeAdapter(anthropic.types.RawMessageStreamEvent)
    blocks = [
        ThinkingBlock(thinking="plan", signature="sig"),
        TextBlock(text="Running."),
        ToolUseBlock(id="toolu_1", name="Bash", input={"command": "ls -la"}),
    ]
    events = [
        event for index, block in enumerate(blocks) for event in content_block_events(index, block)
    ]

    kinds = [(event.type, getattr(getattr(event, "delta", None), "type", None)) for event in events]
    assert kinds == [
        ("content_block_start", None),
        ("content_block_delta", "thinking_delta"),
        ("content_block_delta", "signature_delta"),
        ("content_block_stop", None),
        ("content_block_start", None),
        ("content_block_delta", "text_delta"),
        ("content_block_stop", None),
        ("content_block_start", None),
        ("content_block_delta", "input_json_delta"),
        ("content_block_stop", None),
    ]
    for event in events:
        sdk_event.validate_python(event.model_dump())
    tool_start = events[7]
    assert isinstance(tool_start, ContentBlockStartEvent)
    assert tool_start.content_block == ToolUseBlock(id="toolu_1", name="Bash", input={})
    tool_delta = events[8]
    assert isinstance(tool_delta, ContentBlockDeltaEvent)
    assert json.loads(tool_delta.delta.partial_json) == {"command": "ls -la"}  # type: ignore[union-attr]


def test_sse_frame_names_the_event_and_carries_its_json() -> None:
    event = content_block_events(0, TextBlock(text="hi"))[1]

    frame = sse_frame(event).decode()

    event_line, data_line, blank, end = frame.split("\n")
    assert event_line == "event: content_block_delta"
    assert json.loads(data_line.removeprefix("data: "))["delta"] == {
        "type": "text_delta",
        "text": "hi",
    }
    assert (blank, end) == ("", "")
