"""`synth checkpoint list|show`: a checkpoint's lineage from its producing batch to every
run that sampled through it since: the next batch of its own run, and an evaluation that
named it as `--model`."""

import json
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from typer.testing import CliRunner

from synth_pipelines.cli.main import app
from synth_pipelines.config import Settings
from synth_pipelines.contracts.checkpoint import Checkpoint
from synth_pipelines.contracts.run_spec import RunRequest, batch_key
from synth_pipelines.control.checkpoints import run_checkpoints
from synth_pipelines.control.database import control_engine
from synth_pipelines.control.runs import accept_run
from tests.agent_runs import run_batches
from tests.live_services import platform
from tests.module_state import module_state
from tests.training_runs import (
    accept_training,
    refreshed,
    run_batch,
    script_one_right_one_wrong,
    training_dataset,
)

PLAN = {
    "groups_per_batch": 2,
    "attempts_per_group": 2,
    "batches": 2,
    "learning_rate": 0.01,
    "lora_rank": 4,
    "max_tokens": 64,
    "budget": {"max_active_attempts": 2, "cpus": 2, "memory_mb": 4096, "storage_mb": 8192},
}


@dataclass(frozen=True)
class Lineage:
    train_run: str
    eval_run: str
    checkpoints: list[Checkpoint]


@pytest.fixture(scope="module")
def lineage(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lineage]:
    """Two training batches (checkpoint 0 is the sampler of batch 1), then an evaluation
    started with checkpoint 0 as its model."""
    root = tmp_path_factory.mktemp("checkpoint-lineage")
    with module_state(root), pytest.MonkeyPatch.context() as patch:
        with platform(patch) as (model_url, _proxy):
            train = accept_training(training_dataset(root), PLAN)
            for index in range(PLAN["batches"]):
                script_one_right_one_wrong(model_url)
                result = run_batch(train, index)
                assert result.success, [e.message for e in result.all_events if e.is_failure]
            assert refreshed(train).status == "succeeded"
            checkpoints = run_checkpoints(control_engine(Settings()), train.run_id)
            request = RunRequest.model_validate(
                {
                    **train.spec.model_dump(include={"owner", "dataset", "actor"}),
                    "plan": {
                        "kind": "eval",
                        "attempts_per_task": 1,
                        "budget": PLAN["budget"],
                    },
                    "model": checkpoints[0].sampler_path,
                }
            )
            script_one_right_one_wrong(model_url)
            evaluation = run_batches(
                accept_run(control_engine(Settings()), request, org="local")[0]
            )
            assert evaluation.status == "succeeded"
        yield Lineage(train.run_id, evaluation.run_id, checkpoints)


def _synth(*args: str):
    return CliRunner().invoke(app, list(args))


@pytest.mark.slow
def test_checkpoint_show_lists_its_producer_its_groups_and_both_selecting_runs(lineage):
    first = lineage.checkpoints[0]
    shown = _synth("checkpoint", "show", first.sampler_path, "--json")
    assert shown.exit_code == 0, shown.output
    document = json.loads(shown.stdout)
    produced = document["checkpoint"]
    assert (produced["run_id"], produced["batch"]) == (lineage.train_run, first.batch)
    assert produced["batch"] == batch_key(lineage.train_run, 0)
    assert produced["optimizer_steps"] == 1 and produced["base_model"] == "synth/qwen3-tiny"
    assert document["update"]["status"] == "acknowledged" and document["update"]["datums"] > 0
    selected = {s["run_id"]: s for s in document["selected_by"]}
    assert set(selected) == {lineage.train_run, lineage.eval_run}
    assert selected[lineage.train_run]["policy_batches"] == [batch_key(lineage.train_run, 1)]
    assert selected[lineage.train_run]["as_model"] is False
    assert selected[lineage.eval_run]["as_model"] is True
    assert selected[lineage.eval_run]["policy_batches"] == [batch_key(lineage.eval_run, 0)]
    by_batch = {}
    for group in document["groups"]:
        by_batch.setdefault(group["batch"], []).append(group)
    # Batch 1 of the training run: two qualified groups of two attempts each.
    trained = by_batch.pop(batch_key(lineage.train_run, 1))
    assert [(g["attempts"], g["qualified"], g["mean_reward"]) for g in trained] == [
        (2, True, 0.5),
        (2, True, 0.5),
    ]
    # The evaluation's groups were sampled through it too, and are not qualified.
    evaluated = by_batch.pop(batch_key(lineage.eval_run, 0))
    assert len(evaluated) == 2 and all(g["qualified"] is None for g in evaluated)
    assert by_batch == {}
    last = _synth("checkpoint", "show", lineage.checkpoints[1].sampler_path, "--json")
    assert json.loads(last.stdout)["selected_by"] == []
    assert json.loads(last.stdout)["checkpoint"]["optimizer_steps"] == 2


@pytest.mark.slow
def test_checkpoint_list_prints_whole_ids_that_show_accepts_by_suffix(lineage):
    listed = _synth("checkpoint", "list", "--run", lineage.train_run, "--json")
    assert listed.exit_code == 0, listed.output
    paths = [c["sampler_path"] for c in json.loads(listed.stdout)]
    assert paths == [c.sampler_path for c in lineage.checkpoints]
    # Ids fold onto more lines rather than being cut: the first column, read down, holds them.
    text = _synth("checkpoint", "list").stdout
    first_column = "".join(
        line.split("│")[1].strip() for line in text.splitlines() if line.startswith("│")
    )
    assert all(path in first_column for path in paths) and "…" not in text
    suffix = lineage.checkpoints[1].sampler_path.rsplit("/", 1)[1]
    shown = _synth("checkpoint", "show", suffix, "--json")
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.stdout)["checkpoint"]["sampler_path"] == paths[1]


def test_unknown_checkpoint_is_one_line_exit_2(cli_gateway):
    shown = _synth("checkpoint", "show", "tinker://nowhere/sampler_weights/none")
    assert shown.exit_code == 2
    assert len(shown.stderr.strip().splitlines()) == 1 and "tinker://nowhere" in shown.stderr
    assert shown.stdout == ""
