"""A warm start for Claude Code learns from Claude Code's own captured calls.

A task's demonstration becomes a teacher's script (`teacher_script`): each assistant turn's
completion tokens, for a prompt holding the task's instruction and as many tool results as
turns before it. The real Claude Code, through the capture proxy, bound to the teacher model
(a scripted model service other than the configured one), runs the demonstrated tool call
and then ends; the captured calls are what the warm start learns (`captured_turns`): the
prompt tokens exactly as the proxy rendered them from what Claude Code sent, followed by
exactly the teacher's completion tokens, packed as learning packs an attempt.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from synth_pipelines.config import Settings
from synth_pipelines.contracts.messages import MessagesRequest
from synth_pipelines.control.database import control_engine
from synth_pipelines.evidence.reader import read_attempt_evidence
from synth_pipelines.learning.captured_demonstrations import captured_examples
from synth_pipelines.learning.demonstrations import (
    Demonstration,
    HarnessFrame,
    demonstration_turns,
    read_demonstration,
    teacher_script,
)
from synth_pipelines.rendering.adapters import adapter_for
from synth_pipelines.rendering.model_names import QWEN3_LEARNER
from synth_pipelines.rendering.model_registry import (
    DEFAULT_MODELS,
    TEACHER_MODEL,
    ModelRegistry,
    teacher_entry,
)
from synth_pipelines.storage.objectstore import open_object_store
from tests.conftest import PROJECT_ROOT
from tests.live_services import (
    capture_proxy,
    claude_code,
    claude_code_env,
    model_service,
    set_script,
)

TASK = PROJECT_ROOT / "datasets" / "learn" / "train" / "learn-p00-blue"
RUN, ATTEMPT = "r-teach", "r-teach.b0000.g0000.a000"
INSTRUCTION = "Put the word that ends this sentence in answer.txt: gold"
BASH_TOOL = {
    "name": "Bash",
    "description": "Run a shell command.",
    "input_schema": {
        "type": "object",
        "properties": {"command": {"type": "string"}},
        "required": ["command"],
    },
}


def _demonstration(command: str) -> Demonstration:
    return Demonstration(
        "t",
        INSTRUCTION + "\n",
        [
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": command}}
                ],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "(no output)"}],
            },
            {"role": "assistant", "content": [{"type": "text", "text": "Done."}]},
        ],
    )


def _decoded_prompt(messages: list[dict]) -> str:
    """A Claude Code-shaped request (system prompt, tools, thinking) as the teacher sees it."""
    adapter = adapter_for("qwen")
    request = MessagesRequest.model_validate(
        {
            "model": TEACHER_MODEL,
            "max_tokens": 48,
            "system": "You are terse.",
            "tools": [BASH_TOOL],
            "thinking": {"type": "adaptive"},
            "messages": messages,
        }
    )
    tokens = adapter.render(request).tokens
    return adapter._tokenizer.decode(tokens)


def test_each_turn_of_the_script_answers_only_its_own_prompt():
    demonstration = _demonstration("echo gold > answer.txt")
    entries = teacher_script(adapter_for("qwen"), demonstration)
    first = _decoded_prompt([{"role": "user", "content": INSTRUCTION}])
    second = _decoded_prompt(
        [
            {"role": "user", "content": INSTRUCTION},
            *demonstration.messages[:2],
        ]
    )
    other_task = first.replace(": gold", ": golden")
    matches = [
        [re.search(entry["match"], prompt, re.DOTALL) is not None for entry in entries]
        for prompt in (first, second, other_task)
    ]
    assert matches == [[True, False], [False, True], [False, False]]
    frame = HarnessFrame(system="", tools=[], max_tokens=512)
    expected = [
        turn.completion for turn in demonstration_turns(adapter_for("qwen"), frame, demonstration)
    ]
    assert [entry["completion_tokens"] for entry in entries] == expected
    assert all(entry["repeat"] for entry in entries)


def test_a_task_without_a_demonstration_for_the_harness_is_refused(tmp_path):
    from synth_pipelines.learning.demonstrations import DemonstrationError

    assert read_demonstration(TASK, "claude-code").messages[0]["content"][0]["name"] == "Bash"
    with pytest.raises(DemonstrationError, match=r"demonstration\.claude-code\.json"):
        read_demonstration(
            PROJECT_ROOT / "datasets" / "learn" / "heldout" / "learn-p00-red", "claude-code"
        )


def _claude(proxy_url: str, token: str, workdir: Path) -> subprocess.CompletedProcess:
    """The learner profile's Claude Code (its switches and output limit) on the teacher."""
    profile = json.loads((PROJECT_ROOT / "profiles" / "claude-code-learner.json").read_text())
    args = profile["args"]
    env = claude_code_env(proxy_url, token, workdir, max_output_tokens=48)
    return subprocess.run(
        [str(claude_code()), "-p", INSTRUCTION, "--model", TEACHER_MODEL, *args],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )


@pytest.mark.slow
def test_claude_code_against_the_teacher_captures_the_examples_the_warm_start_learns(
    state, tmp_path
):
    demonstration = _demonstration("echo gold > answer.txt")
    workdir = tmp_path / "work"
    workdir.mkdir()
    with model_service() as learner_url, model_service() as teacher_url:
        # The configured service has no script: a call routed there fails the attempt.
        registry = ModelRegistry([*DEFAULT_MODELS, teacher_entry(teacher_url)])
        set_script(teacher_url, teacher_script(adapter_for("qwen"), demonstration))
        with capture_proxy(learner_url, registry=registry) as proxy:
            token = proxy.token(run=RUN, attempt=ATTEMPT, batch=f"{RUN}.b0000", model=TEACHER_MODEL)
            result = _claude(proxy.url, token, workdir)
            assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
            proxy.flush()
    # Claude Code ran the demonstrated command itself.
    assert (workdir / "answer.txt").read_text() == "gold\n"
    engine, store = control_engine(Settings()), open_object_store(Settings().objects_url)
    calls = sorted(
        read_attempt_evidence(engine, store, [ATTEMPT]).calls[ATTEMPT], key=lambda c: c.call_index
    )
    assert [c.stop_reason for c in calls] == ["tool_use", "end_turn"]
    assert {c.sampler for c in calls} == {f"{QWEN3_LEARNER}@{teacher_url}"}
    taught = [
        entry["completion_tokens"] for entry in teacher_script(adapter_for("qwen"), demonstration)
    ]
    assert [c.completion_tokens for c in calls] == taught
    # What Claude Code sent, not a prompt rebuilt here: its own system prompt and tool text.
    first_prompt = adapter_for("qwen")._tokenizer.decode(calls[0].prompt_tokens)
    assert "You are terse." in first_prompt and "execute shell commands" in first_prompt
    # Claude Code's second prompt extends its first prompt and the teacher's answer, so the
    # attempt is one example: the captured tokens in order, only the teacher's weighted.
    first, second = calls
    held = first.prompt_tokens + first.completion_tokens
    assert second.prompt_tokens[: len(held)] == held
    observed = second.prompt_tokens[len(held) :]
    ((example,),) = captured_examples(engine, store, RUN, registry, QWEN3_LEARNER)
    assert example.tokens == held + observed + second.completion_tokens
    assert example.weights == (
        [0.0] * len(first.prompt_tokens)
        + [1.0] * len(first.completion_tokens)
        + [0.0] * len(observed)
        + [1.0] * len(second.completion_tokens)
    )
