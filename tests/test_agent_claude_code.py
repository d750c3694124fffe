"""Claude Code launched from a profile in the local sandbox, through the proxy.

The model service's scripted mode makes the model emit the tool call that solves the
task; Claude Code executes it in the sandbox; the task's verifier must pass, and the
captured interactions must carry the run, attempt and agent identities.
"""

import asyncio
import json
import os
import subprocess
import sys

import pytest
from sqlalchemy import select

from synth_pipelines.cli.agents import gateway_sessions
from synth_pipelines.cli.gateway_client import GatewayClient
from synth_pipelines.config import Settings
from synth_pipelines.contracts.assessment import Assessment
from synth_pipelines.contracts.profile import PinnedProfile
from synth_pipelines.contracts.run_spec import batch_key
from synth_pipelines.control.database import control_engine
from synth_pipelines.control.schema import evidence_calls
from synth_pipelines.control.table_outputs import load_table
from synth_pipelines.evidence.reader import read_attempt_evidence
from synth_pipelines.runtime.local_run import run_locally
from synth_pipelines.storage.objectstore import open_object_store
from tests.agent_runs import (
    evaluate,
    one_task_dataset,
    profile_document,
    restored_trial,
    trial_outcomes,
)
from tests.conftest import PROJECT_ROOT
from tests.gateway_support import gateway
from tests.live_services import platform, set_script

COMMAND = "grep -m1 -oE '^## [0-9]+\\\\.[0-9]+\\\\.[0-9]+' CHANGELOG.md | cut -d' ' -f2 > VERSION"
TOOL_CALL = (
    "<think>\nI will write the newest released version.\n</think>\n\n"
    '<tool_call>\n{"name": "Bash", "arguments": {"command": "' + COMMAND + '", '
    '"description": "update VERSION"}}\n</tool_call>'
)
FINAL = "<think>\nDone.\n</think>\n\nVERSION now holds the newest released version."
SCRIPT = [
    {"match": "<tool_response>", "completion": FINAL, "repeat": True},
    {"completion": TOOL_CALL, "repeat": True},
]


@pytest.mark.slow
def test_claude_code_profile_passes_a_sample_task_in_the_sandbox(state, tmp_path, monkeypatch):
    with platform(monkeypatch) as (model_url, proxy):
        set_script(model_url, SCRIPT)
        run = evaluate(
            one_task_dataset(tmp_path, "update-version-file"), profile_document("claude-code.json")
        )
        proxy.flush()
        (outcome,) = trial_outcomes(run)
        trial_dir = restored_trial(outcome, tmp_path / "restored")
        local = asyncio.run(
            run_locally(
                PinnedProfile.from_document(profile_document("claude-code.json")),
                one_task_dataset(tmp_path / "again", "update-version-file") / "update-version-file",
                "synth/qwen3-tiny",
                tmp_path / "local-run",
                Settings(),
                gateway_sessions(GatewayClient(Settings())),
            )
        )
        proxy.flush()
    store = open_object_store(Settings().objects_url)
    (assessment,) = Assessment.from_table(
        load_table(control_engine(Settings()), store, "assessments", batch_key(run.run_id, 0))
    )
    assert run.status == "succeeded", outcome.exception_message
    assert assessment.reward == 1.0
    calls = read_attempt_evidence(control_engine(Settings()), store, [outcome.attempt_id]).calls[
        outcome.attempt_id
    ]
    assert len(calls) >= 2
    for call in calls:
        assert (call.run_id, call.attempt_id, call.batch) == (
            run.run_id,
            outcome.attempt_id,
            outcome.batch,
        )
        assert call.agent_id == "main" and call.native_session_id
        assert call.aligned
    assert calls[0].stop_reason == "tool_use"

    # The same profile launched by `synth agent run` is the same launch.
    managed = json.loads((trial_dir / "agent" / "launch.json").read_text())
    direct = json.loads((tmp_path / "local-run" / "agent" / "launch.json").read_text())
    assert managed["launch"] == direct["launch"] and managed["digest"] == direct["digest"]
    assert (local.workspace / "VERSION").read_text() == (
        trial_dir / "artifacts" / "app" / "VERSION"
    ).read_text()
    assert local.outcome.result.exit_code == 0


@pytest.mark.slow
def test_synth_claude_launches_claude_code_here_through_the_proxy(state, tmp_path, monkeypatch):
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "CHANGELOG.md").write_text("# Changes\n\n## Unreleased\n\n## 2.4.1\n- fix\n")
    home = tmp_path / "home"
    home.mkdir()
    with platform(monkeypatch) as (model_url, proxy), gateway(proxy.url) as gw:
        set_script(model_url, SCRIPT)
        # Only the gateway's address and a key: the gateway mints the session's token.
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("SYNTH_PROXY")},
            "HOME": str(home),
            "SYNTH_GATEWAY_URL": gw.url,
            "SYNTH_API_KEY": gw.key(Settings().owner),
        }
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "synth_pipelines.cli",
                "claude",
                "--model",
                "synth/qwen3-tiny",
                "--",
                "-p",
                "Update VERSION.",
                "--allowedTools",
                "Bash",
            ],
            cwd=workspace,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        proxy.flush()
    assert done.returncode == 0, done.stderr
    assert (workspace / "VERSION").read_text() == "2.4.1\n"
    store = open_object_store(Settings().objects_url)
    engine = control_engine(Settings())
    with engine.connect() as conn:
        attempts = {row.attempt_id for row in conn.execute(select(evidence_calls))}
    (attempt,) = attempts
    calls = read_attempt_evidence(engine, store, [attempt]).calls[attempt]
    assert {c.role for c in calls} == {"interactive"} and len(calls) == 2


@pytest.mark.slow
def test_synth_agent_run_reports_a_profile_run_as_json(state, tmp_path, monkeypatch):
    task = one_task_dataset(tmp_path, "update-version-file") / "update-version-file"
    with platform(monkeypatch) as (model_url, proxy):
        set_script(model_url, SCRIPT)
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "synth_pipelines.cli",
                "agent",
                "run",
                "--profile",
                "@profiles/claude-code.json",
                "--task",
                str(task),
                "--output",
                str(tmp_path / "out"),
                "--json",
            ],
            cwd=PROJECT_ROOT,
            env={**os.environ, "SYNTH_PROXY_URL": proxy.url},
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["exit_code"] == 0 and report["missing_outputs"] == []
    assert (tmp_path / "out" / "workspace" / "VERSION").read_text().strip() == "1.7.2"
