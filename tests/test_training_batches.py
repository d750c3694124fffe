"""A 3-batch training run on the local model service: the policy boundary holds.

Every attempt of batch k samples through S_k (the base model, then the checkpoint of
batch k-1); each update is exactly one optimizer step on top of the previous state; the
sampler/trainer agreement at each batch's first forward_backward is exact (on policy)."""

import json

import pytest

from synth_pipelines.config import Settings
from synth_pipelines.contracts.learning import DatumRow, PolicyBinding, QualifiedAttempt
from synth_pipelines.contracts.run_spec import batch_key
from synth_pipelines.control.checkpoints import run_checkpoints
from synth_pipelines.control.database import control_engine
from synth_pipelines.control.policy_updates import find_update
from synth_pipelines.control.table_outputs import load_table
from synth_pipelines.evidence.reader import read_attempt_evidence
from synth_pipelines.storage.objectstore import open_object_store
from tests.live_services import platform
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
    "batches": 3,
    "learning_rate": 0.01,
    "lora_rank": 4,
    "max_tokens": 64,
    "budget": {"max_active_attempts": 1, "cpus": 2, "memory_mb": 4096, "storage_mb": 8192},
}


def _table(asset: str, key: str):
    return load_table(
        control_engine(Settings()), open_object_store(Settings().objects_url), asset, key
    )


@pytest.mark.slow
def test_three_batch_training_run_keeps_the_policy_boundary(
    state, cli_gateway, tmp_path, monkeypatch
):
    with platform(monkeypatch) as (model_url, _proxy):
        run = accept_training(training_dataset(tmp_path), PLAN)
        early = run_batch(run, 1)
        assert not early.success
        for index in range(3):
            script_one_right_one_wrong(model_url)
            result = run_batch(run, index)
            assert result.success, [e.message for e in result.all_events if e.is_failure]
    run = refreshed(run)
    assert run.status == "succeeded"
    engine, store = control_engine(Settings()), open_object_store(Settings().objects_url)
    checkpoints = run_checkpoints(engine, run.run_id)
    assert [c.batch_index for c in checkpoints] == [0, 1, 2]
    assert [c.optimizer_steps for c in checkpoints] == [1, 2, 3]
    assert [c.dataset_cursor for c in checkpoints] == [2, 4, 6]
    assert len({c.sampler_path for c in checkpoints}) == 3
    expected_samplers = ["synth/qwen3-tiny", *(c.sampler_path for c in checkpoints[:2])]
    for index, sampler in enumerate(expected_samplers):
        key = batch_key(run.run_id, index)
        (binding,) = PolicyBinding.from_table(_table("policy", key))
        assert binding.sampler == sampler
        standings = QualifiedAttempt.from_table(_table("qualified_groups", key))
        assert all(s.qualified and s.group_qualified for s in standings)
        assert sorted(s.advantage for s in standings) == [-0.5, -0.5, 0.5, 0.5]
        calls = read_attempt_evidence(engine, store, [s.attempt_id for s in standings]).calls
        assert {c.sampler for attempt in calls.values() for c in attempt} == {sampler}
        rows = DatumRow.from_table(_table("datums", key))
        assert {r.attempt_id for r in rows} == {s.attempt_id for s in standings}
        update = find_update(engine, run.run_id, key)
        assert update.status == "acknowledged" and update.datums == len(rows)
        # On policy: the trainer scores the sampled tokens as the sampler did.
        assert abs(update.metrics.kl_sample_train_v1) < 1e-4
        assert update.metrics.kl_sample_train_v2 < 1e-6
        assert update.metrics.optimizer_step is True
    early_failure = [e for e in early.all_events if e.is_failure]
    assert "not committed yet" in json.dumps([str(e.event_specific_data) for e in early_failure])
    _run_show_gives_every_batch_its_learning_numbers(run.run_id, expected_samplers)


def _run_show_gives_every_batch_its_learning_numbers(run_id: str, samplers: list[str]) -> None:
    from typer.testing import CliRunner

    from synth_pipelines.cli.main import app

    result = CliRunner().invoke(app, ["run", "show", run_id, "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    learning = document["learning"]
    assert [row["sampler"] for row in learning] == samplers
    assert document["learning_warnings"] == []
    for row in learning:
        assert row["optimizer_step"] is True and row["no_step_reason"] is None
        assert (row["attempts"], row["groups"], row["groups_used"]) == (4, 2, 2)
        assert row["frac_mixed"] == 1.0 and row["reward_mean"] == 0.5
        assert row["learning_rate"] == PLAN["learning_rate"]
        assert row["loss"] is not None and row["grad_norm"] > 0
        assert row["turns_per_attempt"] >= 1 and row["action_tokens_per_turn"] > 0
        # Every attempt of the batch was packed, so its datums are the batch's datums.
        assert row["datums_per_attempt_mean"] * row["attempts"] == row["datums"]
        assert row["calls_per_attempt_max"] >= row["calls_per_attempt_mean"] >= 1
        assert sum(row["new_datum_reasons"].values()) == row["datums"] - row["attempts"]
    text = CliRunner().invoke(app, ["run", "show", run_id])
    assert "learning per batch: signal" in text.stdout and "kl v1" in text.stdout
    assert "learning per batch: packing" in text.stdout and "new datum because" in text.stdout
