"""DeepSeek V3.1 adapter: golden renderings and parsing of its native tool-call syntax."""

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
from synth_pipelines.rendering.adapters.deepseek import DeepSeekAdapter, special_token

END = special_token("end of sentence")
CALLS_BEGIN = special_token("tool calls begin")
SPECIALS = (
    END,
    "</think>",
    CALLS_BEGIN,
    special_token("tool call begin"),
    special_token("tool sep"),
    special_token("tool call end"),
    special_token("tool calls end"),
)


@pytest.fixture(scope="module")
def deepseek() -> DeepSeekAdapter:
    return DeepSeekAdapter()


def _text(adapter: DeepSeekAdapter, request: MessagesRequest) -> str:
    return adapter._tokenizer.decode(adapter.render(request).tokens)


def _call(name: str, arguments: str) -> str:
    return (
        f"{CALLS_BEGIN}{special_token('tool call begin')}{name}{special_token('tool sep')}"
        f"{arguments}{special_token('tool call end')}{special_token('tool calls end')}"
    )


def test_tool_loop_renders_tools_in_the_system_prompt(deepseek: DeepSeekAdapter) -> None:
    assert _text(deepseek, tool_loop_request()) == golden("deepseek_tool_loop")


def test_follow_up_with_thinking_opens_a_think_block(deepseek: DeepSeekAdapter) -> None:
    rendered = deepseek.render(follow_up_request({"type": "adaptive"}))

    assert deepseek._tokenizer.decode(rendered.tokens) == golden("deepseek_follow_up_thinking")
    assert rendered.thinking_prefilled
    assert _text(deepseek, follow_up_request()).endswith(special_token("Assistant") + "</think>")


def test_text_and_tool_calls_of_one_turn_end_once(deepseek: DeepSeekAdapter) -> None:
    """tml-renderers 0.2.1 writes end-of-sentence between them; the official template does not."""
    tokens = deepseek.render(tool_loop_request()).tokens
    end = deepseek._tokenizer.encode_special(END)
    calls_begin = deepseek._tokenizer.encode_special(CALLS_BEGIN)

    position = tokens.index(calls_begin, len(tokens) - 60)
    assert tokens[position - 1] != end
    assert tokens.count(end) == 1


def test_parse_text_and_tool_call(deepseek: DeepSeekAdapter) -> None:
    rendered = deepseek.render(follow_up_request())
    completion = sampled_tokens(
        deepseek._tokenizer, "Listing." + _call("Bash", '{"command": "ls -d */"}') + END, SPECIALS
    )

    parsed = deepseek.parse(rendered, completion, "stop")

    text, call = parsed.content
    assert text == TextBlock(text="Listing.")
    assert isinstance(call, ToolUseBlock)
    assert (call.name, call.input) == ("Bash", {"command": "ls -d */"})
    assert (parsed.stop_reason, parsed.malformed) == ("tool_use", None)


def test_parse_thinking_when_the_prompt_opened_it(deepseek: DeepSeekAdapter) -> None:
    rendered = deepseek.render(follow_up_request({"type": "enabled", "budget_tokens": 1024}))
    completion = sampled_tokens(
        deepseek._tokenizer, "Check with ls -d.</think>Two directories." + END, SPECIALS
    )

    parsed = deepseek.parse(rendered, completion, "stop")

    thinking, text = parsed.content
    assert isinstance(thinking, ThinkingBlock) and thinking.thinking == "Check with ls -d."
    assert text == TextBlock(text="Two directories.")
    assert parsed.stop_reason == "end_turn"


def test_tool_call_with_broken_json_becomes_text(deepseek: DeepSeekAdapter) -> None:
    rendered = deepseek.render(follow_up_request())
    completion = sampled_tokens(
        deepseek._tokenizer, _call("Bash", '{"command": "ls"') + END, SPECIALS
    )

    parsed = deepseek.parse(rendered, completion, "stop")

    assert parsed.malformed is not None and "json_syntax" in parsed.malformed
    assert [block.type for block in parsed.content] == ["text"]
    assert parsed.stop_reason == "end_turn"


def test_next_prompt_extends_prompt_plus_sampled_tokens(deepseek: DeepSeekAdapter) -> None:
    request = MessagesRequest.model_validate(
        {
            "model": "m",
            "max_tokens": 64,
            "tools": tool_loop_request().model_dump()["tools"],
            "messages": [{"role": "user", "content": "How many files?"}],
        }
    )
    first = deepseek.render(request)
    completion = sampled_tokens(
        deepseek._tokenizer, "Checking." + _call("Bash", '{"command": "ls"}') + END, SPECIALS
    )
    parsed = deepseek.parse(first, completion, "stop")
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

    second = deepseek.render(MessagesRequest.model_validate(body))

    assert second.tokens[: len(first.tokens) + len(completion)] == first.tokens + completion
