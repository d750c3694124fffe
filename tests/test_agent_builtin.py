"""The built-in agent: completes a task with scripted completions; with the real small
model it runs to its step limit without error. Every call goes through the proxy."""

import json

import pytest

from synth_pipelines.config import Settings
from synth_pipelines.control.database import control_engine
from synth_pipelines.evidence.reader import read_attempt_evidence
from synth_pipelines.storage.objectstore import open_object_store
from tests.agent_runs import (
    evaluate,
    one_task_dataset,
    profile_document,
    restored_trial,
    trial_outcomes,
)
from tests.live_services import platform, set_script

WRITE = (
    '<tool_call>\n{"name": "bash", "arguments": {"command": '
    "\"grep -m1 -oE '^## [0-9]+\\\\.[0-9]+\\\\.[0-9]+' CHANGELOG.md | cut -d' ' -f2 > VERSION\"}}"
    "\n</tool_call>"
)


def _calls(attempt_id: str):
    store = open_object_store(Settings().objects_url)
    return read_attempt_evidence(control_engine(Settings()), store, [attempt_id]).calls[attempt_id]


@pytest.mark.slow
def test_builtin_agent_completes_a_sample_task_with_scripted_completions(
    state, tmp_path, monkeypatch
):
    with platform(monkeypatch) as (model_url, proxy):
        set_script(
            model_url,
            [
                {"match": "<tool_response>", "completion": "VERSION is updated.", "repeat": True},
                {"completion": WRITE, "repeat": True},
            ],
        )
        run = evaluate(
            one_task_dataset(tmp_path, "update-version-file"), profile_document("builtin.json")
        )
        proxy.flush()
        (outcome,) = trial_outcomes(run)
    assert run.status == "succeeded"
    assert json.loads(outcome.rewards_json) == {"reward": 1.0}, outcome.exception_message
    calls = _calls(outcome.attempt_id)
    assert [c.stop_reason for c in calls] == ["tool_use", "end_turn"]
    assert all(c.aligned and c.role == "actor" for c in calls)


@pytest.mark.slow
def test_builtin_agent_with_the_real_small_model_runs_to_its_step_limit(
    state, tmp_path, monkeypatch
):
    profile = profile_document("builtin.json", args=["--max-steps", "3", "--max-tokens", "12"])
    with platform(monkeypatch, scripted=False) as (_model_url, proxy):
        run = evaluate(one_task_dataset(tmp_path, "update-version-file"), profile)
        proxy.flush()
        (outcome,) = trial_outcomes(run)
    assert run.status == "succeeded"
    assert outcome.exception_type is None, outcome.exception_message
    assert json.loads(outcome.rewards_json) == {"reward": 0.0}
    log = (restored_trial(outcome, tmp_path / "restored") / "agent" / "builtin.jsonl").read_text()
    events = [json.loads(line)["event"] for line in log.splitlines() if line.startswith("{")]
    assert events[-1] == "step_limit" and events.count("reply") == 3
    calls = _calls(outcome.attempt_id)
    assert len(calls) == 3 and all(c.aligned for c in calls)
    assert all(c.sampler == "synth/qwen3-tiny" for c in calls)
