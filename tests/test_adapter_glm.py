"""GLM 5.x adapter: golden renderings and parsing of its XML-style tool calls."""

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
from synth_pipelines.rendering.adapters.glm import GlmAdapter

SPECIALS = (
    "<|user|>",
    "<|observation|>",
    "<|endoftext|>",
    "<think>",
    "</think>",
    "<tool_call>",
    "</tool_call>",
    "<arg_key>",
    "</arg_key>",
    "<arg_value>",
    "</arg_value>",
)


@pytest.fixture(scope="module")
def glm() -> GlmAdapter:
    return GlmAdapter()


def test_tool_loop_golden(glm: GlmAdapter) -> None:
    rendered = glm.render(tool_loop_request())

    assert glm._tokenizer.decode(rendered.tokens) == golden("glm_tool_loop")
    assert rendered.thinking_prefilled


def test_follow_up_clears_thinking_of_the_finished_loop(glm: GlmAdapter) -> None:
    text = glm._tokenizer.decode(glm.render(follow_up_request({"type": "adaptive"})).tokens)

    assert text == golden("glm_follow_up_thinking")
    assert "Count with ls." not in text


def test_parse_thinking_text_and_typed_arguments(glm: GlmAdapter) -> None:
    rendered = glm.render(follow_up_request())
    completion = sampled_tokens(
        glm._tokenizer,
        "Use ls -d.</think>Listing.<tool_call>Bash<arg_key>command</arg_key><arg_value>ls -d */"
        "</arg_value><arg_key>timeout</arg_key><arg_value>30</arg_value></tool_call><|observation|>",
        SPECIALS,
    )

    parsed = glm.parse(rendered, completion, "stop")

    thinking, text, call = parsed.content
    assert isinstance(thinking, ThinkingBlock) and thinking.thinking == "Use ls -d."
    assert text == TextBlock(text="Listing.")
    assert isinstance(call, ToolUseBlock)
    assert call.input == {"command": "ls -d */", "timeout": 30}
    assert (parsed.stop_reason, parsed.malformed) == ("tool_use", None)


def test_unterminated_tool_call_is_reported_as_malformed(glm: GlmAdapter) -> None:
    rendered = glm.render(follow_up_request())
    completion = sampled_tokens(
        glm._tokenizer,
        "go</think><tool_call>Bash<arg_key>command</arg_key><arg_value>ls</arg_value><|observation|>",
        SPECIALS,
    )

    parsed = glm.parse(rendered, completion, "stop")

    assert parsed.malformed is not None and "<tool_call>" in parsed.malformed
    assert [block.type for block in parsed.content] == ["thinking", "text"]
    assert parsed.stop_reason == "end_turn"


def test_length_stop_inside_thinking_keeps_it_as_thinking(glm: GlmAdapter) -> None:
    rendered = glm.render(follow_up_request())
    completion = sampled_tokens(glm._tokenizer, "Still weighing the", SPECIALS)

    parsed = glm.parse(rendered, completion, "length")

    assert parsed.stop_reason == "max_tokens"
    assert parsed.content == [
        ThinkingBlock(thinking="Still weighing the", signature=parsed.content[0].signature)  # type: ignore[union-attr]
    ]


def test_next_prompt_extends_prompt_plus_sampled_tokens(glm: GlmAdapter) -> None:
    request = MessagesRequest.model_validate(
        {
            "model": "m",
            "max_tokens": 64,
            "tools": tool_loop_request().model_dump()["tools"],
            "messages": [{"role": "user", "content": "How many files?"}],
        }
    )
    first = glm.render(request)
    completion = sampled_tokens(
        glm._tokenizer,
        "Count.</think>Checking.<tool_call>Bash<arg_key>command</arg_key><arg_value>ls"
        "</arg_value></tool_call><|observation|>",
        SPECIALS,
    )
    parsed = glm.parse(first, completion, "stop")
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

    second = glm.render(MessagesRequest.model_validate(body))

    assert second.tokens[: len(first.tokens) + len(completion)] == first.tokens + completion
