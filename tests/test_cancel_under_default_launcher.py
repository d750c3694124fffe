"""`synth run cancel` of a batch under way, under the embedded default's launcher (each
Dagster run a process of the code server's): the batch's Dagster run is terminated, no
process of its sandboxes is left (the lease each sandbox's owner holds is released; what
a sandbox leaves on the host is reclaimed before the next one starts, `sandbox/leases.py`),
the batch never completes, and the run says `cancelled`."""

from __future__ import annotations

import fcntl
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pytest

from synth_pipelines.config import Settings
from synth_pipelines.control.database import control_engine
from synth_pipelines.control.events import read_events
from synth_pipelines.control.runs import get_run
from tests.conftest import PROJECT_ROOT
from tests.slow_tasks import slow_dataset


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


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


def _wait_for(what: str, check, timeout_sec: float):
    deadline = time.monotonic() + timeout_sec
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.5)
    pytest.fail(f"{what} within {timeout_sec:.0f} s")


@pytest.mark.slow
def test_cancel_stops_an_active_batch_and_its_sandboxes(state, monkeypatch, tmp_path):
    monkeypatch.setenv("SYNTH_DAGSTER_URL", f"http://127.0.0.1:{_free_port()}")
    env = os.environ.copy()

    def synth(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "synth_pipelines.cli", *args],
            cwd=PROJECT_ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )

    assert synth("up", "--json").returncode == 0
    try:
        published = synth(
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
        _wait_for(
            "no batch started",
            lambda: read_events(engine, run_id=run_id, kinds=("batch.started",)),
            240,
        )
        _wait_for("no sandbox of the batch ran", lambda: _held_leases(sandboxes), 240)

        cancel = synth("run", "cancel", run_id, "--json")
        assert cancel.returncode == 0, cancel.stderr
        cancelled = json.loads(cancel.stdout)
        assert cancelled["status"] == "cancelled" and cancelled["terminated"], cancelled
        _wait_for("its sandboxes still run", lambda: not _held_leases(sandboxes) or None, 60)
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
        synth("down")
