"""The built-in agent writes Harbor's trajectory (ATIF) beside its log: every tool call
with its output, so `harbor view` shows the attempt; its JSON log keeps working."""

import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest
from harbor.models.trajectories import Trajectory

from tests.agent_runs import (
    evaluate,
    one_task_dataset,
    profile_document,
    restored_trial,
    trial_outcomes,
)
from tests.live_services import platform, set_script

FAILING_THEN_WRITING = [
    {
        "match": "exit code 3",
        "completion": '<tool_call>\n{"name": "write_file", "arguments": '
        '{"path": "VERSION", "content": "1.4.0\\n"}}\n</tool_call>',
    },
    {"match": "wrote", "completion": "VERSION is written.", "repeat": True},
    {
        "completion": '<tool_call>\n{"name": "bash", "arguments": '
        '{"command": "exit 3"}}\n</tool_call>'
    },
]


@pytest.mark.slow
def test_builtin_agent_writes_a_harbor_trajectory_with_tool_outputs(state, tmp_path, monkeypatch):
    with platform(monkeypatch) as (model_url, _proxy):
        set_script(model_url, FAILING_THEN_WRITING)
        run = evaluate(
            one_task_dataset(tmp_path, "update-version-file"), profile_document("builtin.json")
        )
        (outcome,) = trial_outcomes(run)
    assert outcome.exception_type is None, outcome.exception_message
    # Restored as a trial inside a job folder: the layout `harbor view` scans.
    trial_dir = restored_trial(outcome, tmp_path / "jobs" / "evaluation")
    agent_dir = trial_dir / "agent"
    written = json.loads((agent_dir / "trajectory.json").read_text())
    trajectory = Trajectory.model_validate(written)
    # Exactly what Harbor's own models write for it: no field missing, none extra.
    assert trajectory.to_json_dict() == written
    assert [step.source for step in trajectory.steps] == [
        "system",
        "user",
        "agent",
        "agent",
        "agent",
    ]
    assert trajectory.agent.name == "synth-builtin"
    assert {tool["name"] for tool in trajectory.agent.tool_definitions} == {"bash", "write_file"}
    failing, writing, closing = trajectory.steps[2:]
    (call,) = failing.tool_calls
    assert (call.function_name, call.arguments) == ("bash", {"command": "exit 3"})
    (result,) = failing.observation.results
    assert result.source_call_id == call.tool_call_id
    assert result.content.startswith("exit code 3") and result.extra == {"is_error": True}
    (written,) = writing.observation.results
    assert written.content == "wrote 6 characters to VERSION"
    assert closing.tool_calls is None and closing.message == "VERSION is written."
    for step in trajectory.steps[2:]:
        assert step.metrics.prompt_tokens > 0 and step.metrics.completion_tokens > 0
    assert trajectory.final_metrics.total_completion_tokens == sum(
        step.metrics.completion_tokens for step in trajectory.steps[2:]
    )
    log = [json.loads(line) for line in (agent_dir / "builtin.jsonl").read_text().splitlines()]
    tools = [entry for entry in log if entry["event"] == "tool"]
    assert [entry["output"] for entry in tools] == [result.content, written.content]
    with harbor_viewer(tmp_path / "jobs") as base:
        trials = get_json(f"{base}/api/jobs/evaluation/trials")
        assert [trial["name"] for trial in trials["items"]] == [trial_dir.name]
        shown = get_json(f"{base}/api/jobs/evaluation/trials/{trial_dir.name}/trajectory")
    assert Trajectory.model_validate(shown) == trajectory
    shown_failing, shown_writing = shown["steps"][2:4]
    assert shown_failing["tool_calls"][0]["arguments"] == {"command": "exit 3"}
    assert shown_failing["observation"]["results"][0]["content"] == result.content
    assert shown_writing["observation"]["results"][0]["content"] == written.content


@contextmanager
def harbor_viewer(jobs: Path):
    """`harbor view` serving the API (no frontend build) on a free local port."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    harbor = Path(sys.executable).with_name("harbor")
    command = [str(harbor), "view", str(jobs), "--jobs", "--no-build", "--port", str(port)]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            assert server.poll() is None, server.stderr.read().decode()
            try:
                get_json(f"{base}/api/health")
                break
            except (urllib.error.URLError, ConnectionError):
                assert time.monotonic() < deadline, "harbor view did not start"
                time.sleep(0.2)
        yield base
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        server.stderr.close()


def get_json(url: str):
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())
