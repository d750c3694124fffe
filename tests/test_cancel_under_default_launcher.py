"""`synth run cancel` of a batch under way, under the embedded default's launcher (each
Dagster run a process of the code server's): the batch's Dagster run is terminated, no
process of its sandboxes is left (the lease each sandbox's owner holds is released; what
a sandbox leaves on the host is reclaimed before the next one starts, `sandbox/leases.py`),
the batch never completes, and the run says `cancelled`."""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

import dagster as dg
import pytest

from synth_pipelines.config import Settings
from synth_pipelines.control.database import control_engine
from synth_pipelines.control.events import read_events
from synth_pipelines.control.runs import get_run
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
