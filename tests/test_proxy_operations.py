"""Operating the proxy: health, Prometheus metrics, and prompts fitted to the model's context."""

import json

import anthropic
import httpx
import pytest

from synth_pipelines.config import Settings
from synth_pipelines.control.database import control_engine
from synth_pipelines.evidence.reader import read_attempt_evidence
from synth_pipelines.storage.objectstore import open_object_store
from tests.live_services import MODEL, capture_proxy, model_service, set_script


@pytest.mark.slow
def test_health_and_metrics_report_calls_tokens_and_evidence(state):
    with model_service() as model_url, capture_proxy(model_url) as proxy:
        set_script(model_url, [{"completion": "fine", "repeat": True}])
        client = anthropic.Anthropic(base_url=proxy.url, api_key=proxy.token())
        for _ in range(3):
            client.messages.create(
                model=MODEL, max_tokens=8, messages=[{"role": "user", "content": "hi"}]
            )
        proxy.flush()
        health = httpx.get(f"{proxy.url}/health").json()
        metrics = httpx.get(f"{proxy.url}/metrics").text
    assert health == {"status": "ok", "evidence_pending": 0}
    assert 'synth_proxy_requests_total{route="messages",status="ok"} 3.0' in metrics
    assert f'synth_proxy_completion_tokens_total{{model="{MODEL}"}}' in metrics
    assert "synth_proxy_added_seconds_count 3.0" in metrics
    assert "synth_proxy_evidence_published_calls 3.0" in metrics


@pytest.mark.slow
def test_oversized_tool_result_is_fitted_and_the_capture_holds_what_was_sampled(state):
    huge = "line of build output\n" * 40_000
    with model_service() as model_url, capture_proxy(model_url) as proxy:
        set_script(model_url, [{"completion": "summarised", "repeat": True}])
        client = anthropic.Anthropic(base_url=proxy.url, api_key=proxy.token(attempt="a-fit"))
        reply = client.messages.create(
            model=MODEL,
            max_tokens=1024,
            tools=[
                {
                    "name": "Bash",
                    "description": "run",
                    "input_schema": {
                        "type": "object",
                        "properties": {"command": {"type": "string"}},
                    },
                }
            ],
            messages=[
                {"role": "user", "content": "build it"},
                {
                    "role": "assistant",
                    "content": [
                        {
                            "type": "tool_use",
                            "id": "toolu_1",
                            "name": "Bash",
                            "input": {"command": "make"},
                        }
                    ],
                },
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": huge}],
                },
            ],
        )
        proxy.flush()
    assert reply.content[-1].text == "summarised"
    assert reply.usage.input_tokens <= 32_768 - 1024
    (call,) = read_attempt_evidence(
        control_engine(Settings()), open_object_store(Settings().objects_url), ["a-fit"]
    ).calls["a-fit"]
    assert call.fitted
    effective = json.loads(call.effective_request_json)
    fitted_result = effective["messages"][2]["content"][0]["content"][0]["text"]
    assert "omitted by the proxy" in fitted_result and len(fitted_result) < len(huge)
    assert len(call.prompt_tokens) == reply.usage.input_tokens
