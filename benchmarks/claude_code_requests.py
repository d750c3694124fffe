"""Claude Code-shaped request bodies for benchmarks and tests.

The fixtures reproduce what Claude Code 2.1.x sends by default (recorded shapes, synthetic
text): `system` as three text blocks, a `role: "system"` message inside `messages`, 12 tools
with `$schema` input schemas and one `defer_loading` tool, adaptive thinking with omitted
display, context_management, output_config and metadata; about 49 KB and 11,600 Qwen3 tokens.
`grown_conversation` appends tool round trips the way a long agent session grows.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from synth_pipelines.rendering.thinking_signature import sign_thinking

FIXTURES = Path(__file__).resolve().parent / "fixtures"


RECORDED_TASK = "593"
"""The task fingerprint in the recorded request's billing header line."""


def first_request(task: str = RECORDED_TASK) -> dict[str, Any]:
    """The default first request of a print-mode session (`claude -p 'say hi'`) as a task
    sends it: Claude Code's billing header line carries a fingerprint of the task's first
    message; the rest (system prompt, tools) is the same for every task."""
    body = json.loads((FIXTURES / "claude_code_first_request.json").read_text())
    header = body["system"][0]
    recorded = f"cc_version=2.1.328.{RECORDED_TASK};"
    if recorded not in header["text"]:
        raise RuntimeError("the first-request fixture no longer opens with the billing header")
    header["text"] = header["text"].replace(recorded, f"cc_version=2.1.328.{task};")
    return body


def tool_result_request() -> dict[str, Any]:
    """The second request of a session: a Bash call and its tool_result."""
    return json.loads((FIXTURES / "claude_code_tool_result_request.json").read_text())


def tool_round_trip(turn: int, *, thinking: bool = True) -> list[dict[str, Any]]:
    """One more assistant tool call (thinking omitted, as Claude Code sends it) and its result.

    `thinking=False` leaves the thinking block out, for clients that refuse thinking blocks.
    """
    reasoning = f"Step {turn}: list the next directory and compare the sizes before editing."
    listing = "\n".join(
        f"-rw-r--r-- 1 agent staff {10_000 + 37 * turn * row:>7} Nov 30 09:{row:02d} "
        f"src/module_{turn:03d}/file_{row:02d}_{(turn * row) % 97:02d}.py"
        for row in range(21)
    )
    call_id = f"toolu_grow{turn:04d}"
    return [
        {
            "role": "assistant",
            "content": [
                *(
                    [{"type": "thinking", "thinking": "", "signature": sign_thinking(reasoning)}]
                    if thinking
                    else []
                ),
                {"type": "text", "text": f"Listing directory {turn}."},
                {
                    "type": "tool_use",
                    "id": call_id,
                    "name": "Bash",
                    "input": {"command": f"ls -la src/module_{turn:03d}", "description": "list"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": call_id,
                    "content": listing,
                    "is_error": False,
                    "cache_control": {"type": "ephemeral"},
                }
            ],
        },
    ]


def grown_conversation(turns: int, *, thinking: bool = True) -> dict[str, Any]:
    """The tool_result request followed by `turns` more tool round trips."""
    body = copy.deepcopy(tool_result_request())
    for turn in range(1, turns + 1):
        body["messages"].extend(tool_round_trip(turn, thinking=thinking))
    return body
