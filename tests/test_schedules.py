"""The nightly checkpoint evaluation: evaluated as the daemon would, its run request executed
so that `run_spec` of the evaluation it accepted materializes, tagged with what it evaluates."""

import json
from datetime import UTC, datetime

import dagster as dg

from assets.schedules import nightly_checkpoint_evaluation
from synth_pipelines.config import Settings
from synth_pipelines.contracts.checkpoint import Checkpoint
from synth_pipelines.control.checkpoints import record_checkpoint
from synth_pipelines.control.database import control_engine
from synth_pipelines.control.runs import get_run, list_runs
from synth_pipelines.definitions import definitions
from synth_pipelines.registry.datasets import publish_dataset
from synth_pipelines.storage.objectstore import open_object_store
from synth_pipelines.submission.profiles import publish_profile
from tests.conftest import PROJECT_ROOT, SAMPLE_DATASET
from tests.training_runs import accept_training, training_dataset

NIGHT = datetime(2026, 3, 4, 3, 0, tzinfo=UTC)


def _checkpoint_of_a_training_run(tmp_path) -> Checkpoint:
    trained = accept_training(training_dataset(tmp_path), {"batches": 1})
    return record_checkpoint(
        control_engine(Settings()),
        Checkpoint(
            sampler_path=f"tinker://{trained.run_id}/sampler_weights/b0000",
            run_id=trained.run_id,
            batch=f"{trained.run_id}.b0000",
            batch_index=0,
            state_path=f"tinker://{trained.run_id}/weights/b0000",
            base_model="synth/qwen3-tiny",
            owner=Settings().owner,
            dataset_cursor=2,
            optimizer_steps=1,
            created_at=datetime.now(UTC),
        ),
    )


def _evaluate(instance: dg.DagsterInstance):
    defs = definitions(Settings())
    with dg.build_schedule_context(
        instance=instance,
        scheduled_execution_time=NIGHT,
        resources=defs.resources,
        repository_def=defs.get_repository_def(),
    ) as context:
        return nightly_checkpoint_evaluation.evaluate_tick(context)


def test_nightly_evaluation_is_skipped_until_configured(state):
    with dg.DagsterInstance.get() as instance:
        result = _evaluate(instance)
    assert result.run_requests == []
    assert "set SYNTH_NIGHTLY_DATASET and SYNTH_NIGHTLY_ACTOR" in result.skip_message


def test_nightly_evaluation_pins_an_evaluation_of_the_newest_checkpoint(
    state, tmp_path, monkeypatch
):
    engine, store = control_engine(Settings()), open_object_store(Settings().objects_url)
    publish_dataset(engine, store, SAMPLE_DATASET, "synth/heldout", "v1", Settings().owner)
    oracle = json.loads((PROJECT_ROOT / "profiles" / "oracle.json").read_text())
    publish_profile(engine, oracle, Settings().owner)
    monkeypatch.setenv("SYNTH_NIGHTLY_DATASET", "synth/heldout@v1")
    monkeypatch.setenv("SYNTH_NIGHTLY_ACTOR", "synth/oracle@1")
    checkpoint = _checkpoint_of_a_training_run(tmp_path)

    with dg.DagsterInstance.get() as instance:
        (request,) = _evaluate(instance).run_requests
        (evaluation,) = [run for run in list_runs(engine) if run.kind == "eval"]
        assert evaluation.spec.model == checkpoint.sampler_path
        assert evaluation.idempotency_key == f"nightly-2026-03-04-{checkpoint.sampler_path}"
        assert request.partition_key == evaluation.run_id
        assert request.tags["synth/model"] == checkpoint.sampler_path
        assert request.tags["synth/dataset"] == "synth/heldout@v1"
        assert request.tags["synth/actor"] == "synth/oracle@1"

        # The same night again accepts nothing new and asks for the same pin.
        (again,) = _evaluate(instance).run_requests
        assert again.run_key == request.run_key
        assert len([run for run in list_runs(engine) if run.kind == "eval"]) == 1

        job = definitions(Settings()).resolve_job_def(nightly_checkpoint_evaluation.job_name)
        result = job.execute_in_process(
            partition_key=request.partition_key, instance=instance, tags=request.tags
        )
        assert result.success
        (materialization,) = result.asset_materializations_for_node("run_spec")
        assert materialization.partition == evaluation.run_id
        metadata = materialization.metadata
        assert metadata["dataset"].value == "synth/heldout@v1"
        assert metadata["kind"].value == "eval"
        launched = instance.get_run_by_id(result.run_id)
        assert launched.tags["synth/model"] == checkpoint.sampler_path
    assert get_run(engine, evaluation.run_id).status == "accepted"
