"""The real Claude Code CLI as the reference client of the capture proxy.

Claude Code (installed by the setup, offline, non-essential traffic disabled) runs in print
mode against the proxy with a scoped token; the local model service in scripted mode
answers with a Bash tool call in Qwen3's native syntax, then a final answer. The tool call
must be parsed, executed by Claude Code, its result sent back, and every captured row must
equal what the sampler produced.
"""

import json

import httpx
import pytest
import tinker
from fastapi import FastAPI, Request
from fastapi.responses import Response, StreamingResponse

from synth_pipelines.config import Settings
from synth_pipelines.contracts.interaction import Interaction
from synth_pipelines.control.database import control_engine
from synth_pipelines.evidence.reader import read_attempt_evidence
from synth_pipelines.storage.objectstore import open_object_store
from synth_pipelines.tinker_local.server import serving
from tests.live_services import (
    CLAUDE_FILE_SCRIPT,
    MODEL,
    capture_proxy,
    model_service,
    run_claude_code,
    set_script,
)


def _check_capture(proxy, model_url, attempt: str, *, main_only: bool = True) -> list[Interaction]:
    proxy.flush()
    evidence = read_attempt_evidence(
        control_engine(Settings()), open_object_store(Settings().objects_url), [attempt]
    )
    assert evidence.problems == {}
    calls = evidence.calls[attempt]
    # Scoring a prompt is a one-token sample, which a scripted service answers from its script.
    set_script(model_url, [{"completion": "x", "repeat": True, "end_turn": False}])
    sampler = (
        tinker.ServiceClient(base_url=model_url, api_key="tml-test")
        .create_sampling_client(base_model=MODEL)
        .result()
    )
    for call in calls:
        assert call.run_id == "r-claude" and call.attempt_id == attempt
        assert call.native_session_id
        assert call.agent_id == "main" or not main_only
        assert call.aligned
        # The recorded logprobs are the sampler's own for exactly these tokens.
        scored = sampler.compute_logprobs(
            tinker.ModelInput.from_ints(call.prompt_tokens + call.completion_tokens)
        ).result()
        recomputed = scored[len(call.prompt_tokens) :]
        assert max(abs(a - b) for a, b in zip(recomputed, call.logprobs, strict=True)) < 1e-4
    return calls


@pytest.mark.slow
@pytest.mark.parametrize("bare", [False, True], ids=["default-request", "bare"])
def test_claude_code_tool_round_trip_through_the_proxy(state, tmp_path, bare):
    with model_service() as model_url, capture_proxy(model_url) as proxy:
        set_script(model_url, CLAUDE_FILE_SCRIPT)
        attempt = f"a-claude-{'bare' if bare else 'default'}"
        result = run_claude_code(
            proxy.url, proxy.token(run="r-claude", attempt=attempt), tmp_path, bare=bare
        )
        assert result.returncode == 0, result.stderr
        assert (tmp_path / "made-by-claude.txt").read_text() == "hi\n"
        output = json.loads(result.stdout)
        assert "Done: the file holds hi." in output["result"]
        calls = _check_capture(proxy, model_url, attempt)
    assert len(calls) == 2
    first, second = calls
    assert first.stop_reason == "tool_use" and second.stop_reason == "end_turn"
    assert json.loads(first.response_json)["content"][-1]["name"] == "Bash"
    request = json.loads(second.request_json)
    assert request["stream"] is True
    tool_results = [
        b
        for m in request["messages"]
        if isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_result"
    ]
    assert len(tool_results) == 1
    if not bare:
        assert len(json.loads(first.request_json)["tools"]) >= 10
        assert len(first.prompt_tokens) > 8000


def _stream_breaking_relay(proxy_url: str):
    """A faulty network in front of the proxy: it truncates the first streamed response.

    Claude Code then re-sends the same request with `stream: false`, which the relay passes
    through to the proxy untouched.
    """
    app = FastAPI()
    broken: list[bool] = []

    @app.post("/v1/messages")
    async def relay(request: Request) -> Response:
        body = await request.body()
        if json.loads(body).get("stream") and not broken:
            broken.append(True)

            async def truncated():
                yield b'event: message_start\ndata: {"type":"message_start","message":{"id":'

            return StreamingResponse(truncated(), media_type="text/event-stream")
        headers = {
            k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length")
        }
        async with httpx.AsyncClient(timeout=120) as client:
            upstream = await client.post(f"{proxy_url}/v1/messages", content=body, headers=headers)
        return Response(
            upstream.content, upstream.status_code, media_type=upstream.headers.get("content-type")
        )

    return serving(app), broken


@pytest.mark.slow
def test_claude_code_falls_back_to_non_streaming_and_still_succeeds(state, tmp_path):
    """A stream Claude Code cannot read makes it re-send with stream: false."""
    with model_service() as model_url, capture_proxy(model_url) as proxy:
        set_script(model_url, CLAUDE_FILE_SCRIPT)
        relay, broken = _stream_breaking_relay(proxy.url)
        with relay as relay_url:
            result = run_claude_code(
                relay_url, proxy.token(run="r-claude", attempt="a-nonstream"), tmp_path, bare=True
            )
        calls = _check_capture(proxy, model_url, "a-nonstream")
    assert broken == [True]
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "made-by-claude.txt").read_text() == "hi\n"
    assert json.loads(calls[0].request_json)["stream"] is False
    assert len(calls) == 2


AGENT_CALL = (
    '<tool_call>\n{"name": "Agent", "arguments": {"description": "check files", '
    '"prompt": "SUBTASK-7: list the files and report.", "subagent_type": "general-purpose"}}'
    "\n</tool_call>"
)


@pytest.mark.slow
def test_delegated_subagent_calls_are_captured_with_their_agent_identity(state, tmp_path):
    with model_service() as model_url, capture_proxy(model_url) as proxy:
        set_script(
            model_url,
            [
                {"match": "<tool_response>", "completion": "All done.", "repeat": True},
                {
                    "match": "SUBTASK-7",
                    "completion": "Sub-agent: nothing to report.",
                    "repeat": True,
                },
                {"completion": AGENT_CALL, "repeat": True},
            ],
        )
        result = run_claude_code(proxy.url, proxy.token(run="r-claude", attempt="a-sub"), tmp_path)
        calls = _check_capture(proxy, model_url, "a-sub", main_only=False)
    assert result.returncode == 0, result.stderr
    main = [c for c in calls if c.agent_id == "main"]
    delegated = [c for c in calls if c.agent_id != "main"]
    assert main[0].stop_reason == "tool_use" and main[-1].stop_reason == "end_turn"
    assert delegated and {c.agent_id for c in delegated} == {delegated[0].agent_id}
    child = delegated[0]
    assert child.stop_reason == "end_turn"
    assert child.native_session_id == main[0].native_session_id
    assert "SUBTASK-7" in child.request_json
