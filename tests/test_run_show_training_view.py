"""`synth run show` of a train run leads with its per-batch table (what each batch sampled
from and what learning did) and the reward trend, then the per-task table as for any run."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from synth_pipelines.cli.batch_learning import sparkline
from synth_pipelines.cli.main import app
from tests.recorded_batches import SAMPLERS, accept_recorded_training, record_batch, samplers_in

pytestmark = pytest.mark.usefixtures("cli_gateway")


def test_a_train_run_shows_its_batches_and_reward_trend_before_its_tasks(state, tmp_path):
    run = accept_recorded_training(tmp_path)
    record_batch(run, 0)
    record_batch(run, 1)
    result = CliRunner().invoke(app, ["run", "show", run.run_id])
    assert result.exit_code == 0, result.output
    text = result.stdout
    view = text[text.index("per batch") : text.index("reward per batch")]
    assert "…" not in view and max(map(len, view.splitlines())) <= 80
    header = next(line.split() for line in text.splitlines() if " sampler " in line)
    assert header == [
        "batch", "sampler", "att", "reward", "used", "drop", "datums", "tokens", "step", "kl"
    ]  # fmt: skip
    rows = [line.split() for line in text.splitlines() if line.split()[:1] in (["0"], ["1"])]
    assert rows[0][2:] == ["4", "0.250", "2", "0", "6", "100", "yes", "3.5e-05"]
    assert rows[1][2:] == ["4", "0.750", "1", "1", "4", "100", "NO", "7.0e-05"]
    assert samplers_in(view) == list(SAMPLERS)
    assert "reward per batch ▁█ (min 0.250, max 0.750)" in text
    assert text.index("per batch") < text.index("pass rate")


def test_a_train_run_before_its_first_batch_shows_no_batch_table(state, tmp_path):
    run = accept_recorded_training(tmp_path)
    result = CliRunner().invoke(app, ["run", "show", run.run_id])
    assert result.exit_code == 0, result.output
    assert "per batch" not in result.stdout and "pass rate" in result.stdout


def test_the_sparkline_spans_lowest_to_highest_one_character_per_batch():
    assert sparkline([0.0, 0.5, 1.0]) == "▁▅█"
    assert sparkline([0.2, None, 0.2]) == "▄ ▄"
    assert sparkline([]) == ""
