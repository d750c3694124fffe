"""Evaluation end to end: real Harbor trials in the real sandbox, through the asset graph."""

import json
import subprocess
import time

import dagster as dg
import pytest

from synth_pipelines.config import Settings
from synth_pipelines.contracts.plan import EvalPlan
from synth_pipelines.contracts.profile import PinnedProfile
from synth_pipelines.contracts.run_spec import DatasetPin, RunRequest, batch_key
from synth_pipelines.control.database import control_engine
from synth_pipelines.control.runs import accept_run, get_run
from synth_pipelines.definitions import definitions
from synth_pipelines.registry.datasets import publish_dataset
from synth_pipelines.runtime.results import collect_results
from synth_pipelines.storage.objectstore import open_object_store
from tests.conftest import PROJECT_ROOT, SAMPLE_DATASET
from tests.embedded_environment import ADDRESSES, embedded_environment
from tests.embedded_environment import synth as run_synth


def _evaluate(profile_file: str, attempts: int) -> tuple[str, object]:
    """Accept an evaluation and execute its batches with the same job the sensor launches."""
    engine = control_engine(Settings())
    store = open_object_store(Settings().objects_url)
    dataset, _ = publish_dataset(engine, store, SAMPLE_DATASET, "synth/sample", "v1", "tester")
    request = RunRequest(
        owner="tester",
        dataset=DatasetPin(
            name=dataset.name,
            version=dataset.version,
            digest=dataset.digest,
            task_count=dataset.task_count,
        ),
        actor=PinnedProfile.from_document(
            json.loads((PROJECT_ROOT / "profiles" / profile_file).read_text())
        ),
        plan=EvalPlan(
            kind="eval",
            attempts_per_task=attempts,
            tasks_per_batch=8,
            budget={"max_active_attempts": 2, "cpus": 2, "memory_mb": 4096, "storage_mb": 8192},
        ),
    )
    run, _ = accept_run(engine, request, org="local")
    instance = dg.DagsterInstance.get()
    job = definitions(Settings()).resolve_job_def("evaluation_batch")
    for index in range(run.batch_count):
        key = batch_key(run.run_id, index)
        instance.add_dynamic_partitions("batches", [key])
        assert job.execute_in_process(partition_key=key, instance=instance).success
    run = get_run(engine, run.run_id)
    return run.status, collect_results(engine, store, run)


@pytest.mark.slow
def test_oracle_passes_every_sample_task_twice(state):
    status, results = _evaluate("oracle.json", attempts=2)
    assert status == "succeeded"
    assert len(results.tasks) >= 12
    failing = {t.task_name: t.rewards for t in results.tasks if t.pass_rate != 1.0}
    assert failing == {}
    assert results.summary.attempts == 2 * len(results.tasks)
    assert results.summary.pass_rate == 1.0


@pytest.mark.slow
def test_useless_profile_passes_no_sample_task(state):
    status, results = _evaluate("useless.json", attempts=2)
    assert status == "succeeded"
    assert results.summary.assessed == results.summary.attempts == 2 * len(results.tasks)
    assert results.summary.pass_rate == 0.0


@pytest.mark.slow
def test_submitted_run_completes_after_the_cli_exits(tmp_path):
    env = embedded_environment(tmp_path, ADDRESSES)

    def synth(*args: str) -> subprocess.CompletedProcess:
        return run_synth(env, *args)

    assert synth("up", "--json").returncode == 0
    try:
        assert (
            synth(
                "dataset",
                "publish",
                str(SAMPLE_DATASET),
                "--name",
                "synth/sample",
                "--version",
                "v1",
            ).returncode
            == 0
        )
        plan = json.dumps({"kind": "eval", "max_tasks": 3, "tasks_per_batch": 2})
        started = synth(
            "run",
            "start",
            "--dataset",
            "synth/sample@v1",
            "--actor",
            "@profiles/oracle.json",
            "--plan",
            plan,
            "--idempotency-key",
            "e2e",
            "--json",
        )
        run = json.loads(started.stdout)
        assert run["status"] == "accepted" and run["batches"] == 2
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            shown = json.loads(synth("run", "show", run["run_id"], "--json").stdout)
            if shown["status"] in ("succeeded", "failed"):
                break
            time.sleep(2)
        assert shown["status"] == "succeeded", shown
        assert shown["summary"]["attempts"] == 3 and shown["summary"]["pass_rate"] == 1.0
        again = json.loads(
            synth(
                "run",
                "start",
                "--dataset",
                "synth/sample@v1",
                "--actor",
                "@profiles/oracle.json",
                "--plan",
                plan,
                "--idempotency-key",
                "e2e",
                "--json",
            ).stdout
        )
        assert again["run_id"] == run["run_id"] and again["created"] is False
        events = [
            json.loads(line)
            for line in synth("run", "events", run["run_id"], "--json").stdout.splitlines()
        ]
        kinds = [e["kind"] for e in events]
        assert kinds[0] == "run.accepted" and kinds[-1] == "run.succeeded"
        assert kinds.count("batch.completed") == 2 and kinds.count("attempt.finished") == 3
        resumed = synth("run", "events", run["run_id"], "--after", str(events[2]["seq"]), "--json")
        assert [json.loads(line) for line in resumed.stdout.splitlines()] == events[3:]
    finally:
        synth("down")
