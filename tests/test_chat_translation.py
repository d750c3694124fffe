"""Messages <-> chat completions: what an OpenAI-compatible server is sent, and how its
answer comes back as Anthropic content blocks."""

from __future__ import annotations

import json

import pytest

from proxy.chat_translation import chat_message, chat_request
from synth_pipelines.contracts.api_errors import ApiError
from synth_pipelines.contracts.messages import parse_messages_request

TOOL = {
    "name": "bash",
    "description": "Run a command.",
    "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}},
}


def test_system_tool_use_and_tool_results_become_chat_messages() -> None:
    call = {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"command": "cat V"}}
    document = {
        "model": "judge",
        "max_tokens": 900,
        "system": "Be strict.",
        "tools": [TOOL],
        "tool_choice": {"type": "auto"},
        "temperature": 0.5,
        "stop_sequences": ["END"],
        "messages": [
            {"role": "user", "content": "Check VERSION."},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "hidden", "signature": "s"},
                    {"type": "text", "text": "Looking."},
                    call,
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "1.2.0"},
                    {"type": "text", "text": "Now decide."},
                ],
            },
        ],
    }
    request = parse_messages_request(json.dumps(document))

    body = chat_request(request, "served-name", 512)

    assert body["model"] == "served-name" and body["max_tokens"] == 512
    assert body["messages"] == [
        {"role": "system", "content": "Be strict."},
        {"role": "user", "content": "Check VERSION."},
        {
            "role": "assistant",
            "content": "Looking.",
            "tool_calls": [
                {
                    "id": "toolu_1",
                    "type": "function",
                    "function": {"name": "bash", "arguments": '{"command": "cat V"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "toolu_1", "content": "1.2.0"},
        {"role": "user", "content": "Now decide."},
    ]
    assert body["tools"][0]["function"]["name"] == "bash"
    assert (body["tool_choice"], body["temperature"], body["stop"]) == ("auto", 0.5, ["END"])


def test_tool_calls_answer_becomes_tool_use_blocks_with_usage() -> None:
    answer = {
        "choices": [
            {
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "content": "Writing the verdict.",
                    "tool_calls": [
                        {
                            "id": "call_9",
                            "type": "function",
                            "function": {"name": "bash", "arguments": '{"command": "ls"}'},
                        }
                    ],
                },
            }
        ],
        "usage": {"prompt_tokens": 40, "completion_tokens": 12},
    }

    message = chat_message(answer, "msg_1", "judge")

    assert [block.type for block in message.content] == ["text", "tool_use"]
    assert message.content[1].model_dump() == {
        "type": "tool_use",
        "id": "call_9",
        "name": "bash",
        "input": {"command": "ls"},
    }
    assert message.stop_reason == "tool_use"
    assert (message.usage.input_tokens, message.usage.output_tokens) == (40, 12)
    assert message.model == "judge"


@pytest.mark.parametrize(
    ("finish_reason", "stop_reason"),
    [("stop", "end_turn"), ("length", "max_tokens"), ("content_filter", "end_turn")],
)
def test_finish_reasons_map_to_stop_reasons(finish_reason: str, stop_reason: str) -> None:
    answer = {"choices": [{"finish_reason": finish_reason, "message": {"content": "ok"}}]}
    assert chat_message(answer, "m", "judge").stop_reason == stop_reason


def test_malformed_answers_are_refused_with_what_was_wrong() -> None:
    with pytest.raises(ApiError, match="without a choice"):
        chat_message({"error": "boom"}, "m", "judge")
    bad_call = {
        "choices": [
            {
                "finish_reason": "tool_calls",
                "message": {
                    "tool_calls": [{"id": "c", "function": {"name": "bash", "arguments": "[1]"}}]
                },
            }
        ]
    }
    with pytest.raises(ApiError, match="not a JSON object"):
        chat_message(bad_call, "m", "judge")
