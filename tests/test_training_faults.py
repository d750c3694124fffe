"""Killing the worker between the unresolved mark and the acknowledgement of an update.

The restart refuses to continue on its own; after the operator resolves the update,
training resumes from the unfinished step with no repeated update and the right cursor."""

import asyncio
import os
import signal
import subprocess
import sys
import time

import dagster as dg
import pytest

from assets.sensors import batch_gate
from synth_pipelines.config import Settings
from synth_pipelines.contracts.run_spec import batch_key
from synth_pipelines.control.checkpoints import run_checkpoints
from synth_pipelines.control.database import control_engine
from synth_pipelines.control.policy_updates import UnresolvedUpdateError, find_update, resolve
from synth_pipelines.control.run_lifecycle import interrupt_run, resume_run
from synth_pipelines.definitions import definitions
from tests.conftest import PROJECT_ROOT
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
    "batches": 2,
    "learning_rate": 0.01,
    "lora_rank": 4,
    "max_tokens": 64,
    "budget": {"max_active_attempts": 1, "cpus": 2, "memory_mb": 4096, "storage_mb": 8192},
}
WORKER = """
import sys
from tests.training_runs import run_batch
from synth_pipelines.config import Settings
from synth_pipelines.control.runs import get_run
from synth_pipelines.control.database import control_engine
run_batch(get_run(control_engine(Settings()), sys.argv[1]), 0)
"""


def slow_optimizer(app) -> None:
    @app.middleware("http")
    async def hold_optim_step(request, call_next):
        if request.url.path.endswith("/optim_step"):
            await asyncio.sleep(3600)
        return await call_next(request)


def _wait_for_unresolved(run_id: str, worker: subprocess.Popen, log, timeout: float = 900) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and worker.poll() is None:
        update = find_update(control_engine(Settings()), run_id, batch_key(run_id, 0))
        if update is not None and update.status == "unresolved":
            return
        time.sleep(0.5)
    raise AssertionError(
        f"the worker never marked its update unresolved:\n{log.read_text()[-3000:]}"
    )


@pytest.mark.slow
def test_killed_update_blocks_until_resolved_then_resumes_without_repeating(
    state, tmp_path, monkeypatch
):
    engine = control_engine(Settings())
    run = accept_training(training_dataset(tmp_path), PLAN)
    # The worker gets a model service whose optimizer step never answers.
    with platform(monkeypatch, app_hook=slow_optimizer) as (model_url, _proxy):
        script_one_right_one_wrong(model_url)
        log = tmp_path / "worker.log"
        with log.open("w") as sink:
            worker = subprocess.Popen(
                [sys.executable, "-c", WORKER, run.run_id],
                cwd=PROJECT_ROOT,
                env=os.environ.copy(),
                start_new_session=True,
                stdout=sink,
                stderr=subprocess.STDOUT,
            )
        try:
            _wait_for_unresolved(run.run_id, worker, log)
        finally:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait()
    interrupt_run(engine, run.run_id, "the run worker died", {"batch": batch_key(run.run_id, 0)})

    with pytest.raises(UnresolvedUpdateError, match=f"synth train resolve {run.run_id}"):
        resume_run(engine, run.run_id)
    with platform(monkeypatch) as (model_url, _proxy):
        refused = (
            definitions(Settings())
            .resolve_job_def("training_batch")
            .execute_in_process(
                partition_key=batch_key(run.run_id, 0),
                instance=dg.DagsterInstance.get(),
                asset_selection=[dg.AssetKey("policy_update"), dg.AssetKey("checkpoints")],
                raise_on_error=False,
            )
        )
        # The interrupted run's batch cannot be claimed: the launch ends touching nothing.
        assert refused.success and refused.get_asset_materialization_events() == []
        assert run_checkpoints(engine, run.run_id) == []

        resolved = resolve(engine, run.run_id, note="the worker died before the acknowledgement")
        assert resolved.status == "discarded"
        assert resume_run(engine, run.run_id) == 0
        defs = definitions(Settings())
        with dg.build_sensor_context(
            instance=dg.DagsterInstance.get(), definitions=defs, resources=defs.resources
        ) as context:
            gate = batch_gate(context)
        (resume,) = [r for r in gate.run_requests if ".resume" in r.run_key]
        steps = [key.to_user_string() for key in resume.asset_selection]
        assert steps == ["policy_update", "checkpoints"]
        resumed = defs.resolve_job_def("training_batch").execute_in_process(
            partition_key=resume.partition_key,
            instance=dg.DagsterInstance.get(),
            asset_selection=resume.asset_selection,
        )
        assert resumed.success
        script_one_right_one_wrong(model_url)
        assert run_batch(run, 1).success
    checkpoints = run_checkpoints(engine, run.run_id)
    assert [c.optimizer_steps for c in checkpoints] == [1, 2]
    assert [c.dataset_cursor for c in checkpoints] == [2, 4]
    assert find_update(engine, run.run_id, batch_key(run.run_id, 0)).status == "acknowledged"
    assert refreshed(run).status == "succeeded"
