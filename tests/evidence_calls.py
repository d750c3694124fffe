"""Captured calls for evidence tests: realistic prompts, chosen identities and times."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from benchmarks.claude_code_requests import first_request, grown_conversation
from synth_pipelines.contracts.interaction import Interaction
from synth_pipelines.contracts.messages import parse_messages_request
from synth_pipelines.rendering.adapters import adapter_for

MODEL = "synth/qwen3-tiny"


def interaction(
    call_id: str,
    *,
    attempt: str = "a-1",
    call_index: int = 0,
    age_sec: float = 0.0,
    prompt_tokens: list[int] | None = None,
    request_json: str = "{}",
) -> Interaction:
    return Interaction(
        call_id=call_id,
        run_id="r-1",
        batch=None,
        attempt_id=attempt,
        trial_id=None,
        owner="local",
        role="actor",
        agent_id="main",
        parent_agent_id=None,
        agent_type=None,
        native_session_id="s-1",
        call_index=call_index,
        model=MODEL,
        sampler=MODEL,
        temperature=1.0,
        prompt_tokens=prompt_tokens if prompt_tokens is not None else list(range(1000, 1600)),
        completion_tokens=[9707, 151645],
        logprobs=[-0.25, -0.5],
        sampler_stop_reason="stop",
        stop_reason="end_turn",
        parse_error=False,
        fitted=False,
        request_json=request_json,
        effective_request_json=None,
        response_json='{"id": "msg_x"}',
        render_ms=1.0,
        sample_ms=2.0,
        parse_ms=0.1,
        total_ms=3.5,
        created_at=datetime.now(UTC) - timedelta(seconds=age_sec),
    )


def conversation(attempt: str, turns: int) -> list[Interaction]:
    """The calls of one Claude Code session: the first request, then `turns` tool turns,
    with the prompt tokens the Qwen3 adapter renders for each."""
    adapter = adapter_for("qwen")
    bodies = [first_request(), *(grown_conversation(turn) for turn in range(turns))]
    calls = []
    for index, body in enumerate(bodies):
        request_json = json.dumps(body)
        calls.append(
            interaction(
                f"{attempt}-{index:02d}",
                attempt=attempt,
                call_index=index,
                prompt_tokens=adapter.render(parse_messages_request(request_json)).tokens,
                request_json=request_json,
            )
        )
    return calls
