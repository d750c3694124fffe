"""`synth run cancel` of a batch under way, under the embedded default's launcher (each
Dagster run a process of the code server's): the batch's Dagster run is terminated, no
process of its sandboxes is left (the lease each sandbox's owner holds is released; what
a sandbox leaves on the host is reclaimed before the next one starts, `sandbox/leases.py`),
the batch never completes, and the run says `cancelled`. And a cancel that reaches only
the control database reaches the run worker on its next heartbeat."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pytest

from synth_pipelines.config import Settings
from synth_pipelines.contracts.run_spec import batch_key
from synth_pipelines.control.database import control_engine
from synth_pipelines.control.events import read_events
from synth_pipelines.control.run_lifecycle import cancel_run
from synth_pipelines.control.runs import get_run
from synth_pipelines.control.worker_attempts import run_worker_attempts
from tests.agent_runs import accept, profile_document, publish
from tests.conftest import PROJECT_ROOT
from tests.embedded_environment import ADDRESSES, synth
from tests.fault_injection import wait_for
from tests.production_services import free_port
from tests.slow_tasks import slow_dataset


def _held_leases(sandboxes: Path) -> list[Path]:
    """The sandboxes whose owner still holds their lease (`sandbox/leases.py`)."""
    held = []
    for lease in sorted(sandboxes.glob("*/lease")):
        with lease.open("rb") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                held.append(lease.parent)
    return held


@pytest.mark.slow
def test_cancel_stops_an_active_batch_and_its_sandboxes(state, tmp_path):
    # The test's state directory, with every service on a free port of its own.
    env = {**os.environ, **{variable: f"http://127.0.0.1:{free_port()}" for variable in ADDRESSES}}
    assert synth(env, "up", "--json").returncode == 0
    try:
        published = synth(
            env,
            "dataset",
            "publish",
            str(slow_dataset(tmp_path, 300)),
            "--name",
            "synth/slow",
            "--version",
            "v1",
        )
        assert published.returncode == 0, published.stderr
        plan = json.dumps({"kind": "eval", "max_tasks": 1, "tasks_per_batch": 1})
        started = synth(
            env,
            "run",
            "start",
            "--dataset",
            "synth/slow@v1",
            "--actor",
            "@profiles/oracle.json",
            "--plan",
            plan,
            "--json",
        )
        assert started.returncode == 0, started.stderr
        run_id = json.loads(started.stdout)["run_id"]
        sandboxes = Settings().sandboxes_dir
        engine = control_engine(Settings())
        wait_for(
            lambda: read_events(engine, run_id=run_id, kinds=("batch.started",)),
            "a batch start",
            240,
        )
        wait_for(lambda: _held_leases(sandboxes), "a sandbox of the batch running", 240)

        cancel = synth(env, "run", "cancel", run_id, "--json")
        assert cancel.returncode == 0, cancel.stderr
        cancelled = json.loads(cancel.stdout)
        assert cancelled["status"] == "cancelled" and cancelled["terminated"], cancelled
        wait_for(lambda: not _held_leases(sandboxes), "every sandbox of the batch gone", 60)
        with dg.DagsterInstance.get() as instance:
            (batch,) = [
                record.dagster_run
                for record in instance.get_run_records(
                    filters=dg.RunsFilter(tags={"synth/run": run_id})
                )
                if record.dagster_run.job_name == "evaluation_batch"
            ]
        assert batch.status == dg.DagsterRunStatus.CANCELED
        assert get_run(engine, run_id).status == "cancelled"
        kinds = [event.kind for event in read_events(engine, run_id=run_id)]
        assert kinds[-1] == "run.cancelled" and "batch.completed" not in kinds, kinds
    finally:
        synth(env, "down")


BATCH_PROCESS = """
import sys
import dagster as dg
from synth_pipelines.config import Settings
from synth_pipelines.definitions import definitions
instance = dg.DagsterInstance.get()
instance.add_dynamic_partitions("batches", [sys.argv[1]])
job = definitions(Settings()).resolve_job_def("evaluation_batch")
sys.exit(0 if job.execute_in_process(partition_key=sys.argv[1], instance=instance,
                                     raise_on_error=False).success else 1)
"""
LEASE_SEC = 3


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_heartbeat_carries_cancellation_to_a_batch_nobody_terminates(state, tmp_path):
    """Only the control database hears of the cancel: the run worker learns it from its
    next heartbeat, stops its sandboxes, records what it finished, and exits."""
    publish(slow_dataset(tmp_path, 300))
    run = accept(profile_document("oracle.json"))
    engine = control_engine(Settings())
    log = tmp_path / "worker.log"
    with log.open("w") as sink:
        worker = subprocess.Popen(
            [sys.executable, "-c", BATCH_PROCESS, batch_key(run.run_id, 0)],
            cwd=PROJECT_ROOT,
            env={**os.environ, "SYNTH_WORKER_LEASE_SEC": str(LEASE_SEC)},
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    try:
        sandboxes = Settings().sandboxes_dir
        wait_for(lambda: _held_leases(sandboxes), "a sandbox of the batch running", 240, log)
        assert cancel_run(engine, run.run_id, "the operator cancelled it")
        started = time.monotonic()
        assert worker.wait(timeout=60) == 1, log.read_text()[-3000:]
        assert time.monotonic() - started < LEASE_SEC + 30
    finally:
        if worker.poll() is None:
            worker.kill()
    assert _held_leases(sandboxes) == []
    (attempt,) = run_worker_attempts(engine, run.run_id)
    assert (attempt.status, attempt.end_reason) == ("cancelled", "run is cancelled")
    events = read_events(engine, run_id=run.run_id)
    (ended,) = [e for e in events if e.kind == "worker.cancelled"]
    assert ended.data["progress"] == {"batch.started": 1}
    assert "batch.completed" not in [e.kind for e in events]
    assert get_run(engine, run.run_id).status == "cancelled"
    assert "stopped: run is cancelled" in log.read_text()
