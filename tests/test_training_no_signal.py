"""A training batch with no usable signal applies no step, and the run says so loudly.

Both attempts of every group solve their task: every group's reward is constant, so
qualification drops them all. The batch records why it applied no optimizer step, emits
`batch.no_signal`, and `synth run show` prints a warning (and lists it in `--json`)."""

import json

import pytest
from typer.testing import CliRunner

from synth_pipelines.cli.main import app
from synth_pipelines.config import Settings
from synth_pipelines.control.checkpoints import run_checkpoints
from synth_pipelines.control.database import control_engine
from synth_pipelines.control.events import read_events
from tests.live_services import platform
from tests.training_runs import (
    accept_training,
    refreshed,
    run_batch,
    script_every_attempt_right,
    training_dataset,
)

PLAN = {
    "groups_per_batch": 2,
    "attempts_per_group": 2,
    "batches": 1,
    "learning_rate": 0.01,
    "lora_rank": 4,
    "max_tokens": 64,
    "budget": {"max_active_attempts": 1, "cpus": 2, "memory_mb": 4096, "storage_mb": 8192},
}


@pytest.mark.slow
def test_a_batch_without_signal_records_no_step_and_warns(
    state, cli_gateway, tmp_path, monkeypatch
):
    with platform(monkeypatch) as (model_url, _proxy):
        run = accept_training(training_dataset(tmp_path), PLAN)
        script_every_attempt_right(model_url)
        result = run_batch(run, 0)
        assert result.success, [e.message for e in result.all_events if e.is_failure]
    assert refreshed(run).status == "succeeded"
    engine = control_engine(Settings())
    (event,) = read_events(engine, run_id=run.run_id, kinds=("batch.no_signal",))
    assert "0 of 2 groups qualified" in event.data["reason"]
    assert [c.optimizer_steps for c in run_checkpoints(engine, run.run_id)] == [0]
    shown = CliRunner().invoke(app, ["run", "show", run.run_id, "--json"])
    assert shown.exit_code == 0, shown.output
    document = json.loads(shown.stdout)
    (row,) = document["learning"]
    assert row["optimizer_step"] is False and row["loss"] is None
    assert row["frac_all_good"] == 1.0 and row["groups_used"] == 0
    assert "0 of 2 groups qualified" in row["no_step_reason"]
    (warning,) = document["learning_warnings"]
    assert warning.startswith("batch 0 applied no optimizer step")
    text = CliRunner().invoke(app, ["run", "show", run.run_id])
    assert "warning: batch 0 applied no optimizer step" in text.output
