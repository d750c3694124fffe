"""The platform on its production configuration: PostgreSQL for Dagster and the control
database, S3 for every object, a separate code server, daemon and webserver.

Every test here talks to one deployment of real processes, as an operator would: the
`synth` CLI submits, the daemon runs the batches, and the bucket holds the results.
"""

import json
import os
import signal
import time

import dagster as dg
import pytest

from synth_pipelines.config import Settings
from synth_pipelines.contracts.trial import TrialOutcome
from synth_pipelines.control.database import control_engine
from synth_pipelines.control.events import read_events
from synth_pipelines.control.table_outputs import current_table_ref, load_table
from synth_pipelines.registry.datasets import get_dataset, read_page
from synth_pipelines.storage.objectstore import open_object_store
from tests.production_services import wait_until_stopped

pytestmark = pytest.mark.slow


def _start(production, key: str, max_tasks: int, tasks_per_batch: int) -> dict:
    production.publish_sample_dataset()
    plan = json.dumps({"kind": "eval", "max_tasks": max_tasks, "tasks_per_batch": tasks_per_batch})
    started = production.synth(
        "run",
        "start",
        "--dataset",
        "synth/sample@v1",
        "--actor",
        "@profiles/oracle.json",
        "--plan",
        plan,
        "--idempotency-key",
        key,
        "--json",
    )
    assert started.returncode == 0, started.stderr
    return json.loads(started.stdout)


def _wait_for_event(run_id: str, kind: str, timeout_sec: float = 300) -> None:
    deadline = time.monotonic() + timeout_sec
    while time.monotonic() < deadline:
        if read_events(control_engine(Settings()), run_id=run_id, kinds=(kind,), limit=1):
            return
        time.sleep(0.5)
    pytest.fail(f"run {run_id} recorded no {kind} event within {timeout_sec:.0f} s")


def _dagster_runs(run_id: str) -> list[dg.DagsterRun]:
    with dg.DagsterInstance.get() as instance:
        return list(instance.get_runs(filters=dg.RunsFilter(tags={"synth/run": run_id})))


def _finished_dagster_runs(run_id: str, timeout_sec: float = 60) -> list[dg.DagsterRun]:
    """The run's Dagster runs once each has ended (a run ends a moment after its last step)."""
    deadline = time.monotonic() + timeout_sec
    while time.monotonic() < deadline:
        runs = _dagster_runs(run_id)
        if all(run.is_finished for run in runs):
            return runs
        time.sleep(1)
    pytest.fail(f"the Dagster runs of {run_id} did not end within {timeout_sec:.0f} s")


def test_evaluation_completes_with_every_object_in_s3(production):
    run = _start(production, "prod-eval", max_tasks=2, tasks_per_batch=2)
    assert run["batches"] == 1
    stopped = wait_until_stopped(run["run_id"])
    assert stopped.status == "succeeded"
    shown = production.synth("run", "show", run["run_id"], "--json")
    summary = json.loads(shown.stdout)
    assert summary["summary"]["attempts"] == 2 and summary["summary"]["pass_rate"] == 1.0
    assert summary["trial_records"].startswith(f"s3://{production.environment.bucket}/")

    engine, config = control_engine(Settings()), Settings()
    store = open_object_store(config.objects_url, endpoint_url=config.s3_endpoint_url)
    bucket = production.environment.bucket
    bucket_keys = production.environment.s3.keys(bucket, "platform/")
    dataset = get_dataset(engine, "synth/sample@v1")
    for task in read_page(engine, dataset, 0, dataset.task_count):
        store.get(task.package_key, expected_sha256=task.package_sha256)
    batch = f"{run['run_id']}.b0000"
    for asset in ("trials", "assessments"):
        ref = current_table_ref(engine, asset, batch)
        assert ref is not None, f"no {asset} table for {batch}"
        assert store.head(ref.key) == ref
        assert f"platform/{ref.key}" in bucket_keys
    outcomes = TrialOutcome.from_table(load_table(engine, store, "trials", batch))
    assert len(outcomes) == 2
    for outcome in outcomes:
        assert outcome.trial_key.startswith(f"runs/{run['run_id']}/trials/")
        store.get(outcome.trial_key, expected_sha256=outcome.trial_sha256)
    assert store.head(f"runs/{run['run_id']}/spec.json") is not None
    assert not (config.state_dir / "objects").exists()

    dagster_runs = _finished_dagster_runs(run["run_id"])
    assert sorted(r.job_name for r in dagster_runs) == ["evaluation_batch", "pin_run_spec"]
    assert {r.status for r in dagster_runs} == {dg.DagsterRunStatus.SUCCESS}
    logs = production.environment.s3.keys(bucket, "dagster/compute-logs/")
    for dagster_run in dagster_runs:
        assert any(dagster_run.run_id in key for key in logs), dagster_run.run_id


@pytest.mark.timeout(900)
def test_killing_the_webserver_and_daemon_mid_run_loses_nothing(production):
    run = _start(production, "prod-restart", max_tasks=2, tasks_per_batch=1)
    run_id = run["run_id"]
    _wait_for_event(run_id, "batch.started")
    production.kill("dagster-daemon", "dagster-webserver")
    time.sleep(3)
    production.start("dagster-daemon", "dagster-webserver")

    stopped = wait_until_stopped(run_id)
    assert stopped.status == "succeeded"
    events = read_events(control_engine(Settings()), run_id=run_id)
    kinds = [event.kind for event in events]
    assert kinds[0] == "run.accepted" and kinds[-1] == "run.succeeded"
    assert kinds.count("batch.started") == kinds.count("batch.completed") == 2
    attempts = [event.data["attempt_id"] for event in events if event.kind == "attempt.finished"]
    assert len(attempts) == len(set(attempts)) == 2
    printed = production.synth("run", "events", run_id, "--after", str(events[2].seq), "--json")
    assert [json.loads(line)["seq"] for line in printed.stdout.splitlines()] == [
        event.seq for event in events[3:]
    ]
    dagster_runs = _finished_dagster_runs(run_id)
    assert sorted(r.job_name for r in dagster_runs) == [
        "evaluation_batch",
        "evaluation_batch",
        "pin_run_spec",
    ]
    assert {r.status for r in dagster_runs} == {dg.DagsterRunStatus.SUCCESS}


def _run_worker_pid(dagster_run_id: str) -> int:
    with dg.DagsterInstance.get() as instance:
        for entry in instance.all_logs(dagster_run_id, of_type=dg.DagsterEventType.ENGINE_EVENT):
            pid = entry.dagster_event.event_specific_data.metadata.get("pid")
            if pid is not None:
                return int(pid.value)
    pytest.fail(f"Dagster run {dagster_run_id} recorded no run worker pid")


def test_a_crashed_run_worker_interrupts_the_run_visibly(production):
    run = _start(production, "prod-crash", max_tasks=2, tasks_per_batch=2)
    run_id = run["run_id"]
    _wait_for_event(run_id, "batch.started")
    (batch_run,) = [r for r in _dagster_runs(run_id) if r.job_name == "evaluation_batch"]
    os.kill(_run_worker_pid(batch_run.run_id), signal.SIGKILL)

    stopped = wait_until_stopped(run_id)
    assert stopped.status == "interrupted"
    (interruption,) = read_events(
        control_engine(Settings()), run_id=run_id, kinds=("run.interrupted",)
    )
    assert interruption.data["dagster_run_id"] == batch_run.run_id
    assert interruption.data["batch"] == f"{run_id}.b0000"
    shown = production.synth("run", "show", run_id, "--json")
    assert json.loads(shown.stdout)["status"] == "interrupted"
