"""Every non-Qwen model family end to end: the real Claude Code, the proxy, a family model.

`synth agent run` launches Claude Code from its profile in the sandbox with `--model
synth/<family>-tiny`. The scripted model service answers in the family's own grammar, written
by that family's adapter (its renderer's rendering of an assistant turn), and reports the
random-weight model's own logprobs of those tokens. Claude Code's Bash call must run in the
sandbox; the capture must hold the parsed thinking and tool_use, prompts that `count_tokens`
counts to their rendered length, and logprobs the service re-scores to within 1e-4.
(Qwen3 runs the same path in tests/test_agent_claude_code.py.)

One model service (every family model, each built on first use) and one proxy serve the
whole module: starting them per family cost more than the runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import tinker
from sqlalchemy import Engine, select

from synth_pipelines.config import Settings
from synth_pipelines.contracts.messages import CountTokensRequest, MessagesRequest
from synth_pipelines.control.database import control_engine
from synth_pipelines.control.schema import evidence_calls
from synth_pipelines.evidence.reader import read_attempt_evidence
from synth_pipelines.rendering.adapters import adapter_for
from synth_pipelines.rendering.adapters.conversation import conversation_from_request
from synth_pipelines.rendering.model_names import FAMILY_TINY_MODELS
from synth_pipelines.storage.objectstore import open_object_store
from synth_pipelines.tinker_local.app import create_app
from synth_pipelines.tinker_local.server import serving
from tests.agent_runs import one_task_dataset
from tests.conftest import PROJECT_ROOT, serving_gateway
from tests.live_services import Proxy, capture_proxy, set_script
from tests.module_state import module_state

COMMAND = "grep -m1 -oE '^## [0-9]+\\.[0-9]+\\.[0-9]+' CHANGELOG.md | cut -d' ' -f2 > VERSION"
TOOL_CALL_TURN = [
    {"type": "thinking", "thinking": "I will write the newest released version.", "signature": ""},
    {"type": "text", "text": "Updating VERSION."},
    {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": COMMAND}},
]
FINAL_TURN = [
    {"type": "thinking", "thinking": "The command ran.", "signature": ""},
    {"type": "text", "text": "VERSION now holds the newest released version."},
]
TOOL_RESULT_IN_PROMPT = {
    "deepseek": "tool▁output▁begin",
    "kimi": "## Return of functions\\.Bash",
    "glm": "<tool_response>",
}
"""How each family's prompt shows a tool result: the script's cue for the final answer."""
_BASH = {
    "name": "Bash",
    "description": "Run a shell command",
    "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}},
}


def native_answer(family: str, content: list[dict[str, Any]]) -> list[int]:
    """The token ids of an assistant turn with `content`, as the family's adapter renders
    that turn for training: its native thinking, text and tool-call grammar, then its stop."""
    adapter = adapter_for(family)  # type: ignore[arg-type]
    request = MessagesRequest.model_validate(
        {
            "model": FAMILY_TINY_MODELS[family],
            "max_tokens": 64,
            "thinking": {"type": "adaptive"},
            "tools": [_BASH],
            "messages": [
                {"role": "user", "content": "Go."},
                {"role": "assistant", "content": content},
                {"role": "user", "content": "Next."},
            ],
        }
    )
    through_assistant = adapter.chat_messages(conversation_from_request(request))[:-1]
    (example,) = adapter._thinking_renderer.render_for_sft(through_assistant)
    tokens = [token for span in example.input_token_spans for token in span.span.tokens]
    weights = example.per_token_loss_weight_unshifted
    return adapter.adjust_tokens(
        [token for token, weight in zip(tokens, weights, strict=True) if weight > 0]
    )


def _script(family: str) -> list[dict[str, Any]]:
    return [
        {
            "match": TOOL_RESULT_IN_PROMPT[family],
            "completion_tokens": native_answer(family, FINAL_TURN),
        },
        {"completion_tokens": native_answer(family, TOOL_CALL_TURN)},
    ]


@dataclass(frozen=True)
class Services:
    model_url: str
    proxy: Proxy
    client: tinker.ServiceClient


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Services]:
    """The scripted model service, serving every family model at once, and the proxy."""
    root = tmp_path_factory.mktemp("model-families")
    with module_state(root), pytest.MonkeyPatch.context() as patch:
        patch.setenv("TINKER_TELEMETRY", "0")
        app = create_app(
            tuple(FAMILY_TINY_MODELS.values()),
            scripted=True,
            object_store_url=Settings().objects_url,
            max_loaded=len(FAMILY_TINY_MODELS),
        )
        with serving(app) as model_url, capture_proxy(model_url) as proxy:
            patch.setenv("SYNTH_PROXY_URL", proxy.url)
            patch.setenv("SYNTH_MODEL_SERVICE_URL", model_url)
            client = tinker.ServiceClient(base_url=model_url, api_key="tml-test")
            # `synth agent run` asks the gateway for its session: one that knows the proxy.
            try:
                with serving_gateway(patch):
                    yield Services(model_url, proxy, client)
            finally:
                client.close("success").result()


def _agent_run(model: str, task, output, proxy_url: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "synth_pipelines.cli",
            "agent",
            "run",
            "--profile",
            "@profiles/claude-code.json",
            "--model",
            model,
            "--task",
            str(task),
            "--output",
            str(output),
            "--json",
        ],
        cwd=PROJECT_ROOT,
        env={**os.environ, "SYNTH_PROXY_URL": proxy_url},
        capture_output=True,
        text=True,
        timeout=300,
    )


def _captured_attempts(engine: Engine) -> set[str]:
    with engine.connect() as conn:
        return set(conn.scalars(select(evidence_calls.c.attempt_id).distinct()))


@pytest.mark.slow
@pytest.mark.parametrize("family", sorted(FAMILY_TINY_MODELS))
def test_claude_code_runs_a_task_through_each_family_model(services, tmp_path, family):
    model, proxy = FAMILY_TINY_MODELS[family], services.proxy
    task = one_task_dataset(tmp_path, "update-version-file") / "update-version-file"
    set_script(services.model_url, _script(family))
    engine = control_engine(Settings())
    earlier = _captured_attempts(engine)
    done = _agent_run(model, task, tmp_path / "out", proxy.url)
    assert done.returncode == 0, done.stderr
    ran = json.loads(done.stdout)
    assert ran["exit_code"] == 0
    # Claude Code's Bash call, parsed from the family's grammar, ran in the sandbox.
    assert (tmp_path / "out" / "workspace" / "VERSION").read_text().strip() == "1.7.2"
    proxy.flush()
    attempt = ran["attempt_id"]
    assert _captured_attempts(engine) - earlier == {attempt}
    evidence = read_attempt_evidence(engine, open_object_store(Settings().objects_url), [attempt])
    assert evidence.problems == {}
    calls = evidence.calls[attempt]
    assert [call.stop_reason for call in calls] == ["tool_use", "end_turn"]
    first = json.loads(calls[0].response_json)["content"]
    assert [block["type"] for block in first] == ["thinking", "text", "tool_use"]
    assert first[-1]["name"] == "Bash" and first[-1]["input"] == {"command": COMMAND}
    final = json.loads(calls[1].response_json)["content"]
    assert final[-1]["text"] == FINAL_TURN[1]["text"]

    token = proxy.token(role="actor", model=model)
    # Scoring a prompt is a one-token sample, which a scripted service answers from its script.
    set_script(services.model_url, [{"completion": "x", "repeat": True, "end_turn": False}])
    sampler = services.client.create_sampling_client(base_model=model).result()
    for call in calls:
        assert call.aligned
        body = json.loads(call.request_json)
        counted = httpx.post(
            f"{proxy.url}/v1/messages/count_tokens",
            json={key: body[key] for key in CountTokensRequest.model_fields if key in body},
            headers={"x-api-key": token},
            timeout=60,
        )
        assert counted.status_code == 200, counted.text
        assert counted.json()["input_tokens"] == len(call.prompt_tokens)
        # Only the completion is re-scored: scoring every position of a ~11k-token prompt
        # against a vocabulary of 130k-160k ids took ~17 s a call on two cores.
        recomputed = sampler.compute_logprobs(
            tinker.ModelInput.from_ints(call.prompt_tokens + call.completion_tokens),
            prompt_logprobs_last_n=len(call.completion_tokens),
        ).result()[len(call.prompt_tokens) :]
        assert max(abs(a - b) for a, b in zip(recomputed, call.logprobs, strict=True)) < 1e-4
