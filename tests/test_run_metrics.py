"""`synth run metrics`: one row per batch, as a table, a JSON document or CSV, each agreeing
with the policy updates recorded in the control database; a batch without a recorded
update keeps its attempts and reward, with its learning fields null."""

from __future__ import annotations

import csv
import io
import json
import shutil

import pytest
from typer.testing import CliRunner

from synth_pipelines.cli.main import app
from synth_pipelines.config import Settings
from synth_pipelines.contracts.documents import validated
from synth_pipelines.control.database import control_engine
from synth_pipelines.control.policy_updates import run_updates
from tests.agent_runs import accept_plan, profile_document, publish, run_batches, trial_outcomes
from tests.conftest import SAMPLE_DATASET
from tests.recorded_batches import (
    REWARDS,
    SAMPLERS,
    accept_recorded_training,
    record_batch,
    samplers_in,
)

pytestmark = pytest.mark.usefixtures("cli_gateway")

EVALUATED = ("fix-off-by-one-pagination", "implement-slugify")


@pytest.fixture
def recorded_run(state, tmp_path) -> str:
    run = accept_recorded_training(tmp_path)
    record_batch(run, 0)
    record_batch(run, 1)
    record_batch(run, 2, learned=False)
    return run.run_id


def metrics(*args: str):
    result = CliRunner().invoke(app, ["run", "metrics", *args])
    assert result.exit_code == 0, result.output
    return result


def test_the_json_series_is_the_recorded_updates_then_the_batch_still_learning(recorded_run):
    document = json.loads(metrics(recorded_run, "--json").stdout)
    assert document == validated("run metrics", document)
    first, second, third = document["batches"]
    for row, update in zip(
        (first, second), run_updates(control_engine(Settings()), recorded_run), strict=True
    ):
        assert row["batch"] == update.batch and row["batch_index"] == update.batch_index
        assert row["sampler"] == update.metrics.sampler
        assert row["attempts"] == update.metrics.attempts
        assert row["reward_mean"] == update.metrics.reward_mean
        assert row["datums"] == update.datums
        assert row["groups_used"] == update.metrics.groups_used
        assert row["step_applied"] is update.metrics.optimizer_step
        assert row["kl_sample_train_v1"] == update.metrics.kl_sample_train_v1
        assert row["tokens"] == 12.5 * 2.0 * 4
    assert (first["groups_dropped"], second["groups_dropped"]) == (0, 1)
    assert (first["passed"], second["passed"]) == (1, 3)
    assert third["batch_index"] == 2 and third["attempts"] == 4 and third["passed"] == 3
    assert third["reward_mean"] == sum(REWARDS[2]) / 4
    learning = ("sampler", "groups_used", "groups_dropped", "datums", "tokens", "step_applied")
    assert all(third[name] is None for name in (*learning, "kl_sample_train_v1"))


def test_csv_has_a_header_and_the_same_rows_as_the_json(recorded_run):
    rows = list(csv.DictReader(io.StringIO(metrics(recorded_run, "--csv").stdout)))
    document = json.loads(metrics(recorded_run, "--json").stdout)
    assert len(rows) == 3
    for row, batch in zip(rows, document["batches"], strict=True):
        assert set(row) == set(batch)
        assert int(row["batch_index"]) == batch["batch_index"]
        assert float(row["reward_mean"]) == batch["reward_mean"]
        assert row["sampler"] == (batch["sampler"] or "")
        assert row["step_applied"] == (
            "" if batch["step_applied"] is None else str(batch["step_applied"])
        )


def test_the_table_folds_long_sampler_ids_and_shows_the_reward_trend(recorded_run):
    text = metrics(recorded_run).stdout
    assert "…" not in text and max(map(len, text.splitlines())) <= 80
    table, trend = text.split("reward per batch")
    assert samplers_in(table) == [*SAMPLERS, "-"]
    assert trend.strip() == "▁▇█ (min 0.250, max 0.875)"


def test_json_and_csv_together_are_refused(recorded_run):
    result = CliRunner().invoke(app, ["run", "metrics", recorded_run, "--json", "--csv"])
    assert result.exit_code == 2
    assert "at most one of --json and --csv" in result.stderr


@pytest.mark.slow
def test_an_evaluation_has_one_row_per_batch_agreeing_with_run_show(state, tmp_path):
    # Two tasks, one per batch, two attempts each: the oracle through the batch job.
    for task in EVALUATED:
        shutil.copytree(SAMPLE_DATASET / task, tmp_path / "dataset" / task)
    publish(tmp_path / "dataset")
    plan = {
        "kind": "eval",
        "attempts_per_task": 2,
        "tasks_per_batch": 1,
        "budget": {"max_active_attempts": 2, "cpus": 2, "memory_mb": 4096, "storage_mb": 8192},
    }
    run = run_batches(accept_plan(profile_document("oracle.json"), plan))
    assert run.status == "succeeded"

    document = json.loads(metrics(run.run_id, "--json").stdout)
    assert document == validated("run metrics", document)
    assert (document["kind"], document["status"]) == ("eval", "succeeded")
    show = CliRunner().invoke(app, ["run", "show", run.run_id, "--json"])
    assert show.exit_code == 0, show.output
    shown = json.loads(show.stdout)
    rows = document["batches"]
    assert [row["batch_index"] for row in rows] == list(range(run.batch_count)) == [0, 1]
    # One task per batch: each batch's row is its task's line in `run show`.
    by_task = {task["task"]: task for task in shown["tasks"]}
    assert len(by_task) == len(rows)
    task_of = {outcome.batch: outcome.task_name for outcome in trial_outcomes(run)}
    for row in rows:
        task = by_task[task_of[row["batch"]]]
        assert row["attempts"] == task["attempts"] == 2
        assert row["reward_mean"] == sum(task["rewards"]) / len(task["rewards"])
        learning = ("sampler", "groups_used", "groups_dropped", "datums", "tokens")
        assert all(row[name] is None for name in (*learning, "step_applied", "kl_sample_train_v1"))
    assert sum(row["attempts"] for row in rows) == shown["summary"]["attempts"]
    assert sum(row["passed"] for row in rows) == shown["summary"]["passed"]
