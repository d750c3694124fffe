"""Bad input never gives a traceback: one line naming the problem, exit code 2, nothing written."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import PROJECT_ROOT, SAMPLE_DATASET

pytestmark = pytest.mark.usefixtures("cli_gateway")

SYNTH = [sys.executable, "-m", "synth_pipelines.cli"]


def synth(*args: str, cwd: Path = PROJECT_ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*SYNTH, *args], cwd=cwd, capture_output=True, text=True, env=os.environ.copy(), timeout=120
    )


def assert_one_line_error(result: subprocess.CompletedProcess, *fragments: str) -> None:
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.strip().splitlines() if line.strip()]
    assert "Traceback" not in result.stderr
    message = " ".join(lines)
    for fragment in fragments:
        assert fragment in message, message


def _nothing_written(state: Path) -> bool:
    objects = state / "objects"
    return not objects.exists() or not any(p.is_file() for p in objects.rglob("*"))


def test_malformed_task_toml_is_refused_without_writing(state, tmp_path):
    task = tmp_path / "ds" / "broken-task"
    task.mkdir(parents=True)
    (task / "task.toml").write_text('schema_version = "1.4"\n[agent\ntimeout_sec = 3\n')
    (task / "instruction.md").write_text("do it\n")
    result = synth("dataset", "publish", str(tmp_path / "ds"), "--name", "t/x", "--version", "v1")
    assert_one_line_error(result, "broken-task/task.toml", "not valid TOML")
    assert _nothing_written(state)


def test_unknown_dataset_is_refused(state):
    result = synth(
        "run",
        "start",
        "--dataset",
        "synth/missing@v1",
        "--actor",
        "@profiles/oracle.json",
        "--plan",
        "@plans/eval.json",
    )
    assert_one_line_error(result, "unknown dataset 'synth/missing@v1'")


@pytest.fixture
def published(state):
    result = synth(
        "dataset",
        "publish",
        str(SAMPLE_DATASET),
        "--name",
        "synth/sample",
        "--version",
        "v1",
        "--json",
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_plan_with_an_invalid_field_is_refused(published, state):
    result = synth(
        "run",
        "start",
        "--dataset",
        "synth/sample@v1",
        "--actor",
        "@profiles/oracle.json",
        "--plan",
        '{"kind": "eval", "attempts_per_task": 0}',
    )
    assert_one_line_error(result, "plan", "attempts_per_task", "greater than or equal to 1")
    runs = synth("run", "list", "--json")
    assert json.loads(runs.stdout) == []


def test_missing_profile_file_is_refused(published):
    result = synth(
        "run",
        "start",
        "--dataset",
        "synth/sample@v1",
        "--actor",
        "@profiles/nope.json",
        "--plan",
        "@plans/eval.json",
    )
    assert_one_line_error(result, "actor profile file profiles/nope.json does not exist")


def test_profile_with_unknown_engine_is_refused(published, tmp_path):
    profile = tmp_path / "p.json"
    profile.write_text(json.dumps({"name": "x/y", "version": "1", "engine": "gpt-cli"}))
    result = synth(
        "run",
        "start",
        "--dataset",
        "synth/sample@v1",
        "--actor",
        f"@{profile}",
        "--plan",
        "@plans/eval.json",
    )
    assert_one_line_error(result, "engine", "gpt-cli")


def test_unknown_run_is_refused(state):
    assert_one_line_error(synth("run", "show", "r-doesnotexist"), "no run 'r-doesnotexist'")
    assert_one_line_error(synth("run", "events", "r-doesnotexist"), "no run 'r-doesnotexist'")


def test_json_outputs_are_valid_json(published):
    assert published["ref"] == "synth/sample@v1" and published["created"] is True
    again = json.loads(
        synth(
            "dataset",
            "publish",
            str(SAMPLE_DATASET),
            "--name",
            "synth/sample",
            "--version",
            "v1",
            "--json",
        ).stdout
    )
    assert again["created"] is False and again["digest"] == published["digest"]
    shown = json.loads(synth("dataset", "show", "synth/sample@v1", "--json").stdout)
    assert len(shown["tasks"]) == published["task_count"]
    listed = json.loads(synth("dataset", "list", "--json").stdout)
    assert [d["ref"] for d in listed] == ["synth/sample@v1"]
    started = synth(
        "run",
        "start",
        "--dataset",
        "synth/sample@v1",
        "--actor",
        "@profiles/oracle.json",
        "--plan",
        "@plans/eval.json",
        "--idempotency-key",
        "k1",
        "--json",
    )
    run = json.loads(started.stdout)
    assert run["created"] is True and run["status"] == "accepted"
    retried = json.loads(
        synth(
            "run",
            "start",
            "--dataset",
            "synth/sample@v1",
            "--actor",
            "@profiles/oracle.json",
            "--plan",
            "@plans/eval.json",
            "--idempotency-key",
            "k1",
            "--json",
        ).stdout
    )
    assert retried["run_id"] == run["run_id"] and retried["created"] is False
    events = synth("run", "events", run["run_id"], "--json").stdout.splitlines()
    assert [json.loads(line)["kind"] for line in events] == ["run.accepted"]
    shown_run = json.loads(synth("run", "show", run["run_id"], "--json").stdout)
    assert shown_run["status"] == "accepted" and shown_run["summary"]["attempts"] == 0
