"""Waiting for a run: progress as JSON lines on stderr under `--json` with the documented
document alone on stdout; Ctrl-C stops the waiting and never the run."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from typer.testing import CliRunner

from synth_pipelines.cli.main import app
from synth_pipelines.cli.output import errors
from synth_pipelines.cli.progress import ProgressDisplay, RunProgress
from synth_pipelines.config import Settings
from synth_pipelines.contracts.documents import validated
from synth_pipelines.contracts.run_spec import batch_key
from synth_pipelines.control.database import control_engine
from synth_pipelines.control.events import record_event
from synth_pipelines.control.regrades import record_regrade
from synth_pipelines.control.runs import get_run
from synth_pipelines.registry.datasets import publish_dataset
from synth_pipelines.runtime.regrade_progress import regrade_progress
from synth_pipelines.storage.objectstore import open_object_store
from tests.conftest import PROJECT_ROOT
from tests.recorded_batches import (
    accept_recorded_training,
    record_attempts,
    record_batch,
    started_batch,
)
from tests.test_run_summary import _record, _run
from tests.training_runs import training_dataset

pytestmark = pytest.mark.usefixtures("cli_gateway")


def test_json_progress_goes_to_stderr_one_line_per_change(state, tmp_path):
    run = accept_recorded_training(tmp_path)
    record_batch(run, 0)

    def the_rest_of_the_run() -> None:
        time.sleep(1.5)
        record_batch(run, 1)
        time.sleep(1.5)
        claim = started_batch(run.spec, 2, attempts=4)
        record_attempts(claim, run, 2)
        claim.complete(run.spec, {})

    rest = threading.Thread(target=the_rest_of_the_run)
    rest.start()
    result = CliRunner().invoke(app, ["run", "wait", run.run_id, "--json"])
    rest.join()
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document == validated("run show", document) and document["status"] == "succeeded"
    lines = [json.loads(line) for line in result.stderr.splitlines()]
    assert len(lines) >= 3
    assert all(line == validated("run progress", line) for line in lines)
    assert all(a != b for a, b in itertools.pairwise(lines))
    first, last = lines[0], lines[-1]
    assert (first["batches_done"], first["attempts_done"], first["passed"]) == (1, 4, 1)
    assert (first["reward_mean"], first["step_applied"]) == (0.25, True)
    assert (last["batches_done"], last["batches_total"]) == (3, 3)
    assert (last["attempts_done"], last["attempts_total"], last["passed"]) == (12, 12, 7)
    assert (last["reward_mean"], last["step_applied"]) == (0.75, False)
    assert last["status"] == "succeeded" and last["steps_total"] is None


def test_ctrl_c_while_waiting_leaves_the_run_going_and_says_how_to_wait_again(state, tmp_path):
    publish_dataset(
        control_engine(Settings()),
        open_object_store(Settings().objects_url),
        training_dataset(tmp_path),
        "test/wait",
        "v1",
        Settings().owner,
    )
    # Nothing launches batches here: the run stays accepted for as long as the test waits.
    start = ["run", "start", "--wait", "--json", "--dataset", "test/wait@v1"]
    plan = [
        "--actor",
        "@profiles/oracle.json",
        "--plan",
        '{"kind": "eval", "attempts_per_task": 2}',
    ]
    waiting = subprocess.Popen(
        [sys.executable, "-m", "synth_pipelines.cli", *start, *plan],
        cwd=PROJECT_ROOT,
        env=os.environ.copy(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    progress = json.loads(waiting.stderr.readline())
    assert (progress["status"], progress["attempts_total"]) == ("accepted", 4)
    waiting.send_signal(signal.SIGINT)
    stdout, stderr = waiting.communicate(timeout=60)
    assert waiting.returncode == 130, stderr
    assert stdout == ""
    run_id = progress["run_id"]
    (said,) = stderr.splitlines()
    assert said == (
        f"stopped waiting; run {run_id} goes on: wait again with `synth run wait {run_id}`"
    )
    assert get_run(control_engine(Settings()), run_id).status == "accepted"


def test_a_regrade_counts_its_own_assessments_against_the_runs_attempts(state, tmp_path, capsys):
    run = _run(tmp_path)  # three batches of four attempts
    for index in range(run.batch_count):
        _record(run, index, [0.0, 0.0, 1.0, 0.0])
    engine = control_engine(Settings())
    regrade = record_regrade(engine, run.run_id, "judge", None, run.batch_count)
    other = record_regrade(engine, run.run_id, "verifier", None, run.batch_count)

    def poll(status: str) -> RunProgress:
        return RunProgress(**regrade_progress(engine, regrade, status).model_dump())

    def assessed(by, index: int, passes: int) -> None:
        # What the `assessments` asset records after regrading a batch.
        record_event(
            engine,
            run.run_id,
            "regrade.batch_assessed",
            {
                "regrade_id": by.regrade_id,
                "batch": batch_key(run.run_id, index),
                "attempts": 4,
                "assessed": 4,
                "passed": passes,
            },
        )

    with ProgressDisplay("json", errors) as display:
        display.show(poll("REQUESTED"))
        assessed(regrade, 0, 4)
        assessed(other, 1, 0)
        display.show(poll("REQUESTED"))
        display.show(poll("REQUESTED"))
        assessed(regrade, 0, 3)  # a retried partition counts once, as last assessed
        assessed(regrade, 2, 1)
        display.show(poll("COMPLETED_SUCCESS"))
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert all(line == validated("run progress", line) for line in lines)
    counts = [
        (line["status"], line["batches_done"], line["attempts_done"], line["passed"])
        for line in lines
    ]
    assert counts == [
        ("REQUESTED", 0, 0, 0),
        ("REQUESTED", 1, 4, 4),
        ("COMPLETED_SUCCESS", 2, 8, 4),
    ]
    assert {(line["kind"], line["batches_total"], line["attempts_total"]) for line in lines} == {
        ("regrade", 3, 12)
    }
