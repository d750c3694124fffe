"""`synth run list`: whole ids and the sampled model at 80 columns, filtered by kind and status."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from typer.testing import CliRunner, Result

from synth_pipelines.cli.main import app
from synth_pipelines.config import Settings
from synth_pipelines.contracts.profile import PinnedProfile
from synth_pipelines.contracts.run_spec import RunRequest
from synth_pipelines.control.database import control_engine
from synth_pipelines.control.runs import accept_run, transition
from tests.agent_runs import accept, one_task_dataset, profile_document, publish
from tests.conftest import PROJECT_ROOT
from tests.module_state import module_state

MODEL = "synth/qwen3-tiny"


def synth(*args: str) -> Result:
    return CliRunner().invoke(app, list(args))


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory):
    """An oracle evaluation (no model), a built-in agent's evaluation bound to MODEL that
    succeeded, and an unscored execution."""
    tmp_path = tmp_path_factory.mktemp("run-list")
    with module_state(tmp_path):
        publish(one_task_dataset(tmp_path, "write-robots-txt"))
        oracle = accept(profile_document("oracle.json"))
        request = RunRequest.model_validate(
            {
                **oracle.spec.model_dump(include=set(RunRequest.model_fields)),
                "actor": PinnedProfile.from_document(profile_document("builtin.json")),
                "model": MODEL,
            }
        )
        bound, _ = accept_run(control_engine(Settings()), request, org="local")
        transition(control_engine(Settings()), bound.run_id, "succeeded", "run.succeeded")
        executed = accept(profile_document("oracle.json"), kind="execute")
        yield {"oracle": oracle, "bound": bound, "executed": executed}


def test_at_80_columns_every_id_and_model_is_shown_whole(runs):
    listed = subprocess.run(
        [sys.executable, "-m", "synth_pipelines.cli", "run", "list"],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "80"},
        timeout=120,
    )
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert "…" not in listed.stdout and "..." not in listed.stdout
    for run in runs.values():
        assert any(run.run_id in line for line in lines), (run.run_id, listed.stdout)
    (bound_line,) = [line for line in lines if runs["bound"].run_id in line]
    assert MODEL in bound_line


def test_the_json_document_names_the_model_each_run_sampled_from(runs):
    result = synth("run", "list", "--json")
    assert result.exit_code == 0, result.stderr
    models = {run["run_id"]: run["actor_model"] for run in json.loads(result.stdout)}
    assert models == {
        runs["oracle"].run_id: None,
        runs["bound"].run_id: MODEL,
        runs["executed"].run_id: None,
    }


@pytest.mark.parametrize(
    ("option", "value", "expected"),
    [
        ("--kind", "execute", {"executed"}),
        ("--kind", "eval", {"oracle", "bound"}),
        ("--status", "succeeded", {"bound"}),
        ("--status", "accepted", {"oracle", "executed"}),
        ("--status", "failed", set()),
    ],
)
def test_filters_select_runs_by_kind_and_status(runs, option, value, expected):
    result = synth("run", "list", option, value, "--json")
    assert result.exit_code == 0, result.stderr
    listed = {run["run_id"] for run in json.loads(result.stdout)}
    assert listed == {runs[name].run_id for name in expected}
    shown = synth("run", "list", option, value)
    assert {name for name, run in runs.items() if run.run_id in shown.stdout} == expected


@pytest.mark.parametrize(("option", "value"), [("--kind", "evaluate"), ("--status", "done")])
def test_an_unknown_filter_value_is_one_line_and_exit_2(runs, option, value):
    result = synth("run", "list", option, value)
    assert result.exit_code == 2, result.stdout
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and f"{option} {value!r} is not one of" in lines[0], result.stderr
    assert result.stdout == ""
