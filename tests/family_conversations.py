"""A small tool-use conversation every family adapter is golden-tested on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from synth_pipelines.contracts.messages import MessagesRequest

BASH = {
    "name": "Bash",
    "description": "Run a shell command",
    "input_schema": {
        "type": "object",
        "properties": {"command": {"type": "string"}, "timeout": {"type": "number"}},
        "required": ["command"],
    },
}


def tool_loop_request(thinking: dict[str, Any] | None = None) -> MessagesRequest:
    """System prompt, one tool, a user question, a thinking + text + tool call turn, its result."""
    messages = [
        {"role": "user", "content": "How many files?"},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "Count with ls.", "signature": "s"},
                {"type": "text", "text": "Checking."},
                {
                    "type": "tool_use",
                    "id": "toolu_a",
                    "name": "Bash",
                    "input": {"command": "ls | wc -l", "timeout": 30},
                },
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_a", "content": "2"}],
        },
    ]
    fields: dict[str, Any] = {"thinking": thinking} if thinking else {}
    return MessagesRequest.model_validate(
        {
            "model": "m",
            "max_tokens": 128,
            "system": "Be brief.",
            "tools": [BASH],
            "messages": messages,
            **fields,
        }
    )


def follow_up_request(thinking: dict[str, Any] | None = None) -> MessagesRequest:
    """The tool loop answered, then a new user question."""
    body = tool_loop_request(thinking).model_dump(exclude_none=True)
    body["messages"] += [
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "It printed 2.", "signature": "s"},
                {"type": "text", "text": "There are 2 files."},
            ],
        },
        {"role": "user", "content": "And directories?"},
    ]
    return MessagesRequest.model_validate(body)


def golden(name: str) -> str:
    """A committed rendering, checked by reading it against the family's official template."""
    return (Path(__file__).resolve().parent / "fixtures" / "golden" / f"{name}.txt").read_text()
