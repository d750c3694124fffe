"""An interrupted run says why: the innermost error of its failed batch, in its event and
in `synth run show`, not only in the daemon's log."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import dagster as dg
import pytest

from assets.sensors import batch_failure
from synth_pipelines.config import Settings
from synth_pipelines.contracts.run_spec import batch_key
from synth_pipelines.control.database import control_engine
from synth_pipelines.control.events import read_events
from synth_pipelines.control.runs import get_run
from synth_pipelines.definitions import definitions
from synth_pipelines.registry.datasets import get_dataset, read_page
from tests.agent_runs import accept, one_task_dataset, profile_document, publish
from tests.conftest import PROJECT_ROOT

pytestmark = pytest.mark.usefixtures("cli_gateway")


def test_a_batch_that_fails_interrupts_its_run_with_the_innermost_error(state, tmp_path):
    publish(one_task_dataset(tmp_path, "write-robots-txt"))
    run = accept(profile_document("oracle.json"))
    engine = control_engine(Settings())
    (task,) = read_page(engine, get_dataset(engine, "test/one@v1"), 0, 1)
    # The published package no longer has the bytes its digest names.
    package = Settings().state_dir / "objects" / task.package_key
    package.write_bytes(package.read_bytes() + b"tampered")

    instance = dg.DagsterInstance.get()
    key = batch_key(run.run_id, 0)
    instance.add_dynamic_partitions("batches", [key])
    result = (
        definitions(Settings())
        .resolve_job_def("evaluation_batch")
        .execute_in_process(
            partition_key=key,
            instance=instance,
            tags={"synth/run": run.run_id, "synth/batch": key},
            raise_on_error=False,
        )
    )
    assert not result.success
    (failure,) = instance.all_logs(result.run_id, of_type=dg.DagsterEventType.RUN_FAILURE)
    with dg.build_run_status_sensor_context(
        sensor_name="batch_failure",
        dagster_event=failure.dagster_event,
        dagster_instance=instance,
        dagster_run=result.dagster_run,
        resources=definitions(Settings()).resources,
    ) as status:
        batch_failure(status.for_run_failure())

    assert get_run(engine, run.run_id).status == "interrupted"
    (event,) = read_events(engine, run_id=run.run_id, kinds=("run.interrupted",))
    cause = event.data["cause"]
    assert cause["error_type"] == "ObjectIntegrityError"
    assert (
        task.package_key in cause["message"]
        and "changed after it was published" in (cause["message"])
    )

    shown = subprocess.run(
        [sys.executable, "-m", "synth_pipelines.cli", "run", "show", run.run_id, "--json"],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        env=os.environ.copy(),
        timeout=120,
    )
    assert shown.returncode == 1
    stopped = json.loads(shown.stdout)["stopped_by"]
    assert stopped["event"] == "run.interrupted" and stopped["batch"] == key
    assert stopped["cause"] == cause
    printed = subprocess.run(
        [sys.executable, "-m", "synth_pipelines.cli", "run", "show", run.run_id],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        env=os.environ.copy(),
        timeout=120,
    )
    assert f"run.interrupted in batch {key}: ObjectIntegrityError:" in printed.stderr
