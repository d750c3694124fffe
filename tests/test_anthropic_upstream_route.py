"""An `anthropic` route: the proxy forwards Messages to an upstream Anthropic endpoint (here a
second real capture proxy, in front of the scripted model service), with the key from its
own environment; the call is captured as text evidence that learning excludes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest

from proxy.app import create_app
from proxy.config import ProxyConfig
from synth_pipelines.config import Settings
from synth_pipelines.contracts.assessment import Assessment
from synth_pipelines.contracts.exclusion import ExclusionReason
from synth_pipelines.contracts.interaction import Interaction
from synth_pipelines.evidence.spool import Spool
from synth_pipelines.learning.qualification import attempt_exclusion
from synth_pipelines.rendering.model_registry import (
    DEFAULT_MODELS,
    AnthropicRoute,
    ModelEntry,
    ModelRegistry,
)
from synth_pipelines.tinker_local.server import serving
from tests.live_services import MODEL, Proxy, capture_proxy, model_service, set_script

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

JUDGE_MODEL = "judge/upstream-qwen"
KEY_ENV = "SYNTH_TEST_UPSTREAM_KEY"


@contextmanager
def front_proxy(upstream_url: str) -> Iterator[Proxy]:
    """A proxy whose judge model is the upstream's `MODEL`, through an `anthropic` route;
    its state (spool) apart from the upstream's."""
    config = Settings()
    entry = ModelEntry(
        id=JUDGE_MODEL,
        family="qwen",
        context_window=32_768,
        max_output_tokens=1024,
        backend=AnthropicRoute(base_url=upstream_url, model=MODEL, api_key_env=KEY_ENV),
        trainable=False,
    )
    proxy_config = ProxyConfig(
        state_dir=config.state_dir / "front",
        signing_key_path=config.signing_key_path,
        database_url=config.control_database_url,
        objects_url=config.objects_url,
        model_service_url="http://127.0.0.1:9",
        model_service_key="tml-test",
        workers=1,
        report_published=None,
        evidence_settle_sec=600,
        registry=ModelRegistry([*DEFAULT_MODELS, entry]),
    )
    with serving(create_app(proxy_config)) as url:
        yield Proxy(url, proxy_config)


def _staged(proxy: Proxy) -> list[Interaction]:
    spool = Spool(proxy.config.state_dir / "spool")
    return Interaction.from_table(spool.load_table(spool.staged_call_ids()))


def test_anthropic_route_forwards_and_captures_text_evidence(state, monkeypatch):
    with model_service() as model_url, capture_proxy(model_url) as upstream:
        set_script(model_url, [{"completion": "The work is correct.", "repeat": True}])
        monkeypatch.setenv(KEY_ENV, upstream.token(role="judge", run="r-up", attempt="a-up"))
        with front_proxy(upstream.url) as front:
            headers = {"x-api-key": front.token(role="judge", model=JUDGE_MODEL)}
            body = {
                "model": JUDGE_MODEL,
                "max_tokens": 64,
                "system": "You are a judge.",
                "messages": [{"role": "user", "content": "Is the work correct?"}],
            }
            answer = httpx.post(f"{front.url}/v1/messages", json=body, headers=headers, timeout=60)
            streamed = httpx.post(
                f"{front.url}/v1/messages",
                json={**body, "stream": True},
                headers=headers,
                timeout=60,
            )
            counted = httpx.post(
                f"{front.url}/v1/messages/count_tokens",
                json={k: body[k] for k in ("model", "system", "messages")},
                headers=headers,
                timeout=60,
            )
            calls = _staged(front)
            # Without the key in the proxy's environment the route refuses, naming it.
            monkeypatch.delenv(KEY_ENV)
            keyless = httpx.post(f"{front.url}/v1/messages", json=body, headers=headers)

    assert answer.status_code == 200, answer.text
    message = answer.json()
    assert message["model"] == JUDGE_MODEL
    assert message["content"] == [{"type": "text", "text": "The work is correct."}]
    assert message["stop_reason"] == "end_turn"
    assert message["usage"]["output_tokens"] > 0

    events = [
        json.loads(line.removeprefix("data: "))
        for line in streamed.text.splitlines()
        if line.startswith("data: ")
    ]
    kinds = [event["type"] for event in events]
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    text = "".join(e["delta"]["text"] for e in events if e["type"] == "content_block_delta")
    assert text == "The work is correct."
    assert counted.status_code == 200 and counted.json()["input_tokens"] > 0

    assert keyless.status_code == 500
    assert KEY_ENV in keyless.json()["error"]["message"]

    assert len(calls) == 2
    sampler = f"anthropic:{MODEL}@{upstream.url}"
    for call in calls:
        assert call.sampler == sampler
        assert call.role == "judge" and call.model == JUDGE_MODEL
        assert (call.prompt_tokens, call.completion_tokens, call.logprobs) == ([], [], [])
        assert json.loads(call.response_json)["content"][0]["text"] == "The work is correct."
        assert json.loads(call.request_json)["system"] == "You are a judge."

    passed = Assessment.model_validate(
        {
            "assessment_id": "x",
            "run_id": "r",
            "batch": "b",
            "attempt_id": "a",
            "task_name": "t",
            "assessor": "verifier",
            "assessor_digest": "d",
            "source_trial_id": "t1",
            "artifacts_digest": None,
            "reward": 1.0,
            "rewards_json": None,
            "valid": True,
            "error_class": None,
            "reason": None,
            "rationale": None,
            "assessed_at": "2026-01-01T00:00:00Z",
        }
    )
    exclusion = attempt_exclusion(passed, calls, None, "tinker://policy")
    assert exclusion is not None and "inference-only route anthropic:" in exclusion.detail
    assert "no token ids or logprobs" in exclusion.detail
    assert exclusion.reason is ExclusionReason.TEXT_EVIDENCE
