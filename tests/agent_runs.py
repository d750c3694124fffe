"""Running a profile through the platform's runtime (the same job the batch gate launches)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import dagster as dg

from synth_pipelines.config import Settings
from synth_pipelines.contracts.profile import PinnedProfile
from synth_pipelines.contracts.run_record import RunRecord
from synth_pipelines.contracts.run_spec import DatasetPin, RunRequest, batch_key
from synth_pipelines.contracts.trial import TrialOutcome
from synth_pipelines.control.database import control_engine
from synth_pipelines.control.runs import accept_run, get_run
from synth_pipelines.control.table_outputs import load_table
from synth_pipelines.definitions import definitions
from synth_pipelines.registry.datasets import get_dataset, publish_dataset
from synth_pipelines.runtime.trial_records import restore_trial
from synth_pipelines.storage.objectstore import open_object_store
from tests.conftest import PROJECT_ROOT, SAMPLE_DATASET


def profile_document(name: str, **changes) -> dict:
    return {**json.loads((PROJECT_ROOT / "profiles" / name).read_text()), **changes}


def one_task_dataset(tmp_path: Path, task: str) -> Path:
    directory = tmp_path / "dataset"
    shutil.copytree(SAMPLE_DATASET / task, directory / task)
    return directory


def publish(dataset_dir: Path):
    store = open_object_store(Settings().objects_url)
    return publish_dataset(
        control_engine(Settings()), store, dataset_dir, "test/one", "v1", "tester"
    )[0]


def accept(
    profile: dict, *, judge: dict | None = None, attempts: int = 1, kind: str = "eval"
) -> RunRecord:
    """A run of the published `test/one@v1`, accepted as `synth run start` accepts it."""
    plan = {
        "kind": kind,
        "attempts_per_task": attempts,
        "budget": {"max_active_attempts": 1, "cpus": 2, "memory_mb": 4096, "storage_mb": 8192},
    }
    return accept_plan(profile, plan, judge=judge)


def accept_plan(profile: dict, plan: dict, *, judge: dict | None = None) -> RunRecord:
    """A run of the published `test/one@v1` with this plan, accepted as `synth run start`
    accepts it."""
    engine = control_engine(Settings())
    dataset = get_dataset(engine, "test/one@v1")
    request = RunRequest(
        owner=Settings().owner,
        dataset=DatasetPin(
            name=dataset.name,
            version=dataset.version,
            digest=dataset.digest,
            task_count=dataset.task_count,
        ),
        actor=PinnedProfile.from_document(profile),
        judge=PinnedProfile.from_document(judge) if judge else None,
        plan=plan,
    )
    return accept_run(engine, request, org="local")[0]


def run_batches(run: RunRecord) -> RunRecord:
    instance = dg.DagsterInstance.get()
    job = definitions(Settings()).resolve_job_def(
        {"eval": "evaluation_batch", "execute": "execution_batch"}[run.kind]
    )
    for index in range(run.batch_count):
        key = batch_key(run.run_id, index)
        instance.add_dynamic_partitions("batches", [key])
        assert job.execute_in_process(partition_key=key, instance=instance).success
    return get_run(control_engine(Settings()), run.run_id)


def evaluate(
    dataset_dir: Path, profile: dict, attempts: int = 1, judge: dict | None = None
) -> RunRecord:
    publish(dataset_dir)
    return run_batches(accept(profile, judge=judge, attempts=attempts))


def trial_outcomes(run: RunRecord) -> list[TrialOutcome]:
    store = open_object_store(Settings().objects_url)
    return [
        outcome
        for index in range(run.batch_count)
        for outcome in TrialOutcome.from_table(
            load_table(control_engine(Settings()), store, "trials", batch_key(run.run_id, index))
        )
    ]


def restored_trial(outcome: TrialOutcome, into: Path) -> Path:
    store = open_object_store(Settings().objects_url)
    return restore_trial(store, outcome.trial_key, outcome.trial_sha256, into)
