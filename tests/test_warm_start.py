"""A warm start from demonstrations, through the job the batch gate launches, and its
checkpoint evaluated by the same harness recipe through the capture proxy."""

from __future__ import annotations

import json
import shutil
import tomllib
from pathlib import Path

import dagster as dg
import pytest

from synth_pipelines.config import Settings
from synth_pipelines.contracts.profile import PinnedProfile
from synth_pipelines.contracts.run_record import RunRecord
from synth_pipelines.contracts.run_spec import DatasetPin, RunRequest
from synth_pipelines.control.checkpoints import run_checkpoints
from synth_pipelines.control.database import control_engine
from synth_pipelines.control.events import read_events
from synth_pipelines.control.runs import accept_run, get_run
from synth_pipelines.definitions import definitions
from synth_pipelines.evidence.reader import read_attempt_evidence
from synth_pipelines.learning.demonstrations import DemonstrationError, read_demonstration
from synth_pipelines.registry.datasets import publish_dataset
from synth_pipelines.storage.objectstore import open_object_store
from synth_pipelines.submission.run_requests import Submission, SubmissionError, build_run_request
from tests.agent_runs import profile_document, run_batches, trial_outcomes
from tests.conftest import PROJECT_ROOT
from tests.live_services import platform

LEARN_TRAIN = PROJECT_ROOT / "datasets" / "learn" / "train"
STEPS = 6


def _demonstration(task_dir: Path) -> dict:
    answer = tomllib.loads((task_dir / "task.toml").read_text())["metadata"]["answer"]
    call = {"path": "/app/answer.txt", "content": answer}
    return {
        "messages": [
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "toolu_1", "name": "write_file", "input": call}
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "content": f"wrote {len(answer)} characters to /app/answer.txt",
                        "is_error": False,
                    }
                ],
            },
            {"role": "assistant", "content": [{"type": "text", "text": "Done."}]},
        ]
    }


def _two_tasks(tmp_path: Path) -> Path:
    directory = tmp_path / "learn"
    for source in sorted(LEARN_TRAIN.iterdir())[:2]:
        task = shutil.copytree(source, directory / source.name)
        demonstration = task / "solution" / "demonstration.json"
        if not demonstration.exists():
            demonstration.write_text(json.dumps(_demonstration(task)))
    return directory


def _accept(dataset_dir: Path, plan: dict, model: str | None = None) -> RunRecord:
    engine = control_engine(Settings())
    store = open_object_store(Settings().objects_url)
    dataset, _ = publish_dataset(engine, store, dataset_dir, "test/learn", "v1", "tester")
    request = RunRequest(
        owner=Settings().owner,
        dataset=DatasetPin(
            name=dataset.name,
            version=dataset.version,
            digest=dataset.digest,
            task_count=dataset.task_count,
        ),
        actor=PinnedProfile.from_document(profile_document("builtin.json")),
        plan=plan,
        model=model,
    )
    return accept_run(engine, request, org="local")[0]


def _run_warm_start(run: RunRecord) -> dg.ExecuteInProcessResult:
    instance = dg.DagsterInstance.get()
    instance.add_dynamic_partitions("runs", [run.run_id])
    return (
        definitions(Settings())
        .resolve_job_def("warm_start_job")
        .execute_in_process(partition_key=run.run_id, instance=instance, raise_on_error=False)
    )


@pytest.mark.slow
def test_warm_start_lowers_the_loss_and_its_checkpoint_is_evaluated_through_the_harness(
    state, tmp_path, monkeypatch
):
    dataset_dir = _two_tasks(tmp_path)
    with platform(monkeypatch, scripted=False) as (_, proxy):
        plan = {"kind": "warm_start", "steps": STEPS, "demonstrations_per_step": 2}
        run = _accept(dataset_dir, plan)
        result = _run_warm_start(run)
        assert result.success
        engine = control_engine(Settings())
        assert get_run(engine, run.run_id).status == "succeeded"
        (checkpoint,) = run_checkpoints(engine, run.run_id)
        assert checkpoint.optimizer_steps == STEPS
        # A waiting `synth train start --wait` fills its bar from these, one per step.
        steps = read_events(engine, run_id=run.run_id, kinds=("warm_start.step",))
        assert [(e.data["step"], e.data["steps"]) for e in steps] == [
            (step, STEPS) for step in range(1, STEPS + 1)
        ]
        (materialization,) = result.asset_materializations_for_node("warm_start")
        metadata = materialization.metadata
        assert metadata["loss_last"].value < metadata["loss_first"].value
        assert metadata["datums"].value == 4
        (completed,) = read_events(engine, run_id=run.run_id, kinds=("batch.completed",))
        assert completed.data["checkpoint"] == checkpoint.sampler_path

        # Launched again, it cannot claim the finished run's batch: it touches nothing.
        again = _run_warm_start(run)
        assert again.success
        assert again.asset_materializations_for_node("warm_start") == []
        assert run_checkpoints(engine, run.run_id) == [checkpoint]
        assert len(read_events(engine, run_id=run.run_id, kinds=("batch.claimed",))) == 1

        evaluation = run_batches(
            _accept(
                dataset_dir,
                {"kind": "eval", "budget": {"max_active_attempts": 1}},
                model=checkpoint.sampler_path,
            )
        )
        outcomes = trial_outcomes(evaluation)
        assert len(outcomes) == 2
        proxy.flush()
        evidence = read_attempt_evidence(
            engine,
            open_object_store(Settings().objects_url),
            [outcome.attempt_id for outcome in outcomes],
        )
        calls = [call for attempt in evidence.calls.values() for call in attempt]
        assert calls, "the checkpoint was not sampled through the proxy"
        assert {call.sampler for call in calls} == {checkpoint.sampler_path}


def test_warm_start_of_a_harness_without_a_known_frame_is_refused(state, tmp_path):
    engine = control_engine(Settings())
    store = open_object_store(Settings().objects_url)
    publish_dataset(engine, store, _two_tasks(tmp_path), "test/learn", "v1", "tester")
    claude = tmp_path / "claude.json"
    claude.write_text(json.dumps(profile_document("claude-code.json")))
    with pytest.raises(SubmissionError, match=r"only known by running it.*captured_run"):
        build_run_request(
            engine,
            Submission(
                dataset="test/learn@v1",
                actor=f"@{claude}",
                plan='{"kind": "warm_start"}',
                kinds=("train", "warm_start"),
            ),
            Settings().owner,
        )


def test_a_captured_run_that_does_not_exist_is_refused_before_anything_runs(state, tmp_path):
    engine = control_engine(Settings())
    store = open_object_store(Settings().objects_url)
    publish_dataset(engine, store, _two_tasks(tmp_path), "test/learn", "v1", "tester")
    claude = tmp_path / "claude.json"
    claude.write_text(json.dumps(profile_document("claude-code.json")))
    with pytest.raises(SubmissionError, match="captured_run: no run 'r-missing'"):
        build_run_request(
            engine,
            Submission(
                dataset="test/learn@v1",
                actor=f"@{claude}",
                plan='{"kind": "warm_start", "captured_run": "r-missing"}',
                kinds=("train", "warm_start"),
            ),
            Settings().owner,
        )


def test_a_task_without_a_demonstration_is_named(tmp_path):
    task = tmp_path / "no-demo"
    (task / "solution").mkdir(parents=True)
    (task / "instruction.md").write_text("Do it.")
    with pytest.raises(DemonstrationError, match=r"no-demo has no solution/demonstration\.json"):
        read_demonstration(task)
