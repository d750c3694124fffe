"""Kimi K2 Thinking adapter: golden renderings, native tool ids, parsing its tool-call syntax."""

from __future__ import annotations

import pytest
from family_conversations import follow_up_request, golden, tool_loop_request
from native_tokens import sampled_tokens

from synth_pipelines.contracts.messages import (
    MessagesRequest,
    TextBlock,
    ThinkingBlock,
    ToolUseBlock,
)
from synth_pipelines.rendering.adapters.kimi import KimiAdapter

SPECIALS = (
    "<|im_end|>",
    "<think>",
    "</think>",
    "<|tool_calls_section_begin|>",
    "<|tool_call_begin|>",
    "<|tool_call_argument_begin|>",
    "<|tool_call_end|>",
    "<|tool_calls_section_end|>",
)


@pytest.fixture(scope="module")
def kimi() -> KimiAdapter:
    return KimiAdapter()


def _call(native_id: str, arguments: str) -> str:
    return (
        f"<|tool_calls_section_begin|><|tool_call_begin|>{native_id}<|tool_call_argument_begin|>"
        f"{arguments}<|tool_call_end|><|tool_calls_section_end|>"
    )


def test_tool_loop_golden(kimi: KimiAdapter) -> None:
    assert kimi._tokenizer.decode(kimi.render(tool_loop_request()).tokens) == golden(
        "kimi_tool_loop"
    )


def test_follow_up_clears_thinking_of_the_finished_loop(kimi: KimiAdapter) -> None:
    text = kimi._tokenizer.decode(kimi.render(follow_up_request({"type": "adaptive"})).tokens)

    assert text == golden("kimi_follow_up_thinking")
    assert "Count with ls." not in text


def test_history_tool_ids_are_kimi_native_whatever_the_client_ids(kimi: KimiAdapter) -> None:
    body = tool_loop_request().model_dump(exclude_none=True)
    body["messages"] += [
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_b", "name": "Read", "input": {"p": 1}}],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_b", "content": "x"}],
        },
    ]

    text = kimi._tokenizer.decode(kimi.render(MessagesRequest.model_validate(body)).tokens)

    assert "## Return of functions.Bash:0\n2" in text
    assert "<|tool_call_begin|>functions.Read:1<|tool_call_argument_begin|>" in text
    assert "## Return of functions.Read:1\nx" in text and "toolu_" not in text


def test_parse_thinking_text_and_tool_call(kimi: KimiAdapter) -> None:
    rendered = kimi.render(follow_up_request({"type": "adaptive"}))
    completion = sampled_tokens(
        kimi._tokenizer,
        "<think>Use ls -d.</think>Listing."
        + _call("functions.Bash:1", '{"command": "ls -d */"}')
        + "<|im_end|>",
        SPECIALS,
    )

    parsed = kimi.parse(rendered, completion, "stop")

    thinking, text, call = parsed.content
    assert isinstance(thinking, ThinkingBlock) and thinking.thinking == "Use ls -d."
    assert text == TextBlock(text="Listing.")
    assert isinstance(call, ToolUseBlock) and call.input == {"command": "ls -d */"}
    assert call.id.startswith("toolu_")
    assert (parsed.stop_reason, parsed.malformed) == ("tool_use", None)


def test_tool_call_with_broken_json_becomes_text(kimi: KimiAdapter) -> None:
    rendered = kimi.render(follow_up_request())
    completion = sampled_tokens(
        kimi._tokenizer,
        "<think>go</think>" + _call("functions.Bash:1", '{"command": ') + "<|im_end|>",
        SPECIALS,
    )

    parsed = kimi.parse(rendered, completion, "stop")

    assert parsed.malformed is not None
    assert [block.type for block in parsed.content] == ["thinking", "text"]
    assert parsed.stop_reason == "end_turn"


def test_next_prompt_extends_prompt_plus_sampled_tokens(kimi: KimiAdapter) -> None:
    request = MessagesRequest.model_validate(
        {
            "model": "m",
            "max_tokens": 64,
            "system": "Be brief.",
            "tools": tool_loop_request().model_dump()["tools"],
            "messages": [{"role": "user", "content": "How many files?"}],
        }
    )
    first = kimi.render(request)
    completion = sampled_tokens(
        kimi._tokenizer,
        "<think>Count.</think>Checking."
        + _call("functions.Bash:0", '{"command": "ls"}')
        + "<|im_end|>",
        SPECIALS,
    )
    parsed = kimi.parse(first, completion, "stop")
    call = parsed.content[-1]
    assert isinstance(call, ToolUseBlock)
    body = request.model_dump(exclude_none=True)
    body["messages"] += [
        {"role": "assistant", "content": [block.model_dump() for block in parsed.content]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "2"}],
        },
    ]

    second = kimi.render(MessagesRequest.model_validate(body))

    assert second.tokens[: len(first.tokens) + len(completion)] == first.tokens + completion
