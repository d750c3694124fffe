"""SIGKILL at each step of a training batch's lifecycle, and what survives it.

The run worker or the model service dies at a learning step: the model service holds the
step (its request gets no answer), so the batch is exactly there when the test kills a
process. A model service killed before or after the optimizer step is restarted and the
run worker recovers by itself: it makes its training client again from durable state (the
binding's, or the acknowledged update's) and sends what the service lost again. Otherwise
what was killed is restarted, the run is interrupted as the failure sensor does, an
unresolved update is resolved as an operator would, and the batch gate resumes it. The
Dagster daemon dies right after a checkpoint is recorded, and the proxy's publisher dies
while it reports a committed chunk. Afterwards the saved trainer state has applied exactly
as many optimizer steps as there are acknowledged updates; checkpoints and cursor are
those of the batches done; and every evidence row is one call, published once, in a chunk
whose checksum holds.
"""

from __future__ import annotations

import shutil
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import pytest

from assets.sensors import batch_gate
from synth_pipelines.config import Settings
from synth_pipelines.contracts.evidence_chunk import EvidenceChunk
from synth_pipelines.contracts.run_spec import batch_key
from synth_pipelines.control.checkpoints import batch_checkpoint, run_checkpoints
from synth_pipelines.control.database import control_engine, engine_for
from synth_pipelines.control.events import read_events
from synth_pipelines.control.policy_updates import UnresolvedUpdateError, find_update, resolve
from synth_pipelines.control.run_lifecycle import interrupt_run, resume_run
from synth_pipelines.control.runs import get_run
from synth_pipelines.control.worker_attempts import run_worker_attempts
from synth_pipelines.definitions import definitions
from synth_pipelines.evidence.publisher import EvidencePublisher
from synth_pipelines.evidence.spool import Spool
from synth_pipelines.storage.objectstore import open_object_store
from tests.conftest import PROJECT_ROOT
from tests.fault_injection import (
    DagsterDaemon,
    ModelServiceProcess,
    RunWorker,
    acknowledged_updates,
    applied_optimizer_steps,
    audit_evidence,
    captured_call,
    publisher_killed_at_report,
    run_steps,
    wait_for,
    wait_until_held,
)
from tests.live_services import capture_proxy
from tests.training_runs import (
    accept_training,
    script_one_right_one_wrong,
    training_dataset,
)

PLAN = {
    "groups_per_batch": 1,
    "attempts_per_group": 2,
    "batches": 1,
    "learning_rate": 0.01,
    "lora_rank": 4,
    "max_tokens": 64,
    "budget": {"max_active_attempts": 2, "cpus": 2, "memory_mb": 4096, "storage_mb": 8192},
}
SAMPLING_STEPS = ("policy", "trials", "assessments", "qualified_groups", "datums")
LEARNING_STEPS = ("policy_update", "checkpoints")
# The builtin agent's two calls per attempt under script_one_right_one_wrong: the tool
# call, then "Done." after the tool's output.
CALLS_PER_ATTEMPT = 2


@dataclass(frozen=True)
class Cell:
    hold: str
    killed: str
    update_after_kill: str | None
    resumes_at: tuple[str, ...]
    """The steps the resumed batch runs; none when the run worker recovers by itself."""


BOTH_STEPS = ("policy_update", "checkpoints")
CELLS = {
    "forward_backward-run_worker": Cell("forward_backward", "run worker", None, BOTH_STEPS),
    "forward_backward-model_service": Cell("forward_backward", "model service", None, ()),
    "optim_step-model_service": Cell("optim_step", "model service", "unresolved", BOTH_STEPS),
    "sampler_save_in_flight-run_worker": Cell(
        "save_weights_for_sampler", "run worker", "acknowledged", ("checkpoints",)
    ),
    "sampler_save_in_flight-model_service": Cell(
        "save_weights_for_sampler", "model service", "acknowledged", ()
    ),
    "sampler_saved_not_recorded-run_worker": Cell(
        "sampler_saved", "run worker", "acknowledged", ("checkpoints",)
    ),
}


def _kill(cell: Cell, service: ModelServiceProcess, worker: RunWorker) -> None:
    if cell.killed == "run worker":
        worker.kill()
        return
    service.kill()
    service.start()
    # The worker's pending call fails against the restarted service: before the optimizer
    # step or after its acknowledgement the worker recovers and completes the batch; an
    # optimizer step in flight fails it, for the operator.
    recovered = worker.wait(timeout=300) == 0
    assert recovered == (not cell.resumes_at), worker.tail()


def _resolve_if_required(cell: Cell, run_id: str) -> None:
    engine = control_engine(Settings())
    update = find_update(engine, run_id, batch_key(run_id, 0))
    assert (update.status if update else None) == cell.update_after_kill, update
    if cell.update_after_kill != "unresolved":
        return
    with pytest.raises(UnresolvedUpdateError, match=f"synth train resolve {run_id}"):
        resume_run(engine, run_id)
    assert resolve(engine, run_id, note="the model service died mid-step").status == "discarded"


def _resume(cell: Cell, run_id: str) -> None:
    assert resume_run(control_engine(Settings()), run_id) == 0
    instance = dg.DagsterInstance.get()
    defs = definitions(Settings())
    with dg.build_sensor_context(
        instance=instance, definitions=defs, resources=defs.resources
    ) as context:
        gate = batch_gate(context)
    (request,) = [r for r in gate.run_requests if ".resume" in r.run_key]
    assert tuple(key.to_user_string() for key in request.asset_selection) == cell.resumes_at
    resumed = defs.resolve_job_def("training_batch").execute_in_process(
        partition_key=request.partition_key,
        instance=instance,
        asset_selection=request.asset_selection,
        raise_on_error=False,
    )
    assert resumed.success


@dataclass(frozen=True)
class LearnedBatch:
    """A one-batch training run whose batch has sampled, been assessed and packed its
    datums: the state every cell starts from, copied so the cells stay independent."""

    root: Path
    run_id: str


@pytest.fixture(scope="module")
def learned_batch(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LearnedBatch]:
    root = tmp_path_factory.mktemp("learned-batch")
    with pytest.MonkeyPatch.context() as patch:
        use_state(patch, root)
        patch.delenv("TINKER_BASE_URL", raising=False)
        run = accept_training(training_dataset(root), PLAN)
        service = ModelServiceProcess(root)
        service.start()
        try:
            patch.setenv("SYNTH_MODEL_SERVICE_URL", service.url)
            with capture_proxy(service.url) as proxy:
                patch.setenv("SYNTH_PROXY_URL", proxy.url)
                script_one_right_one_wrong(service.url)
                sampled = run_steps(run.run_id, 0, SAMPLING_STEPS)
                assert sampled.success
        finally:
            service.stop()
            control_engine(Settings()).dispose()
            engine_for.cache_clear()
    yield LearnedBatch(root, run.run_id)


def use_state(patch: pytest.MonkeyPatch, root: Path) -> None:
    """The platform's state and Dagster home under `root`, as the `state` fixture sets them."""
    home = root / "dagster_home"
    if not home.exists():
        home.mkdir()
        shutil.copy(PROJECT_ROOT / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    patch.setenv("SYNTH_DATA_DIR", str(root / "state"))
    patch.setenv("DAGSTER_HOME", str(home))
    patch.delenv("SYNTH_DATABASE_URL", raising=False)
    patch.delenv("SYNTH_OBJECT_STORE_URL", raising=False)
    engine_for.cache_clear()


@pytest.fixture
def cell_state(learned_batch: LearnedBatch, tmp_path: Path, monkeypatch) -> Iterator[str]:
    """A private copy of the learned batch's state; yields its run id."""
    for part in ("state", "dagster_home"):
        shutil.copytree(
            learned_batch.root / part, tmp_path / part, ignore=shutil.ignore_patterns("work")
        )
    use_state(monkeypatch, tmp_path)
    monkeypatch.delenv("TINKER_BASE_URL", raising=False)
    yield learned_batch.run_id
    control_engine(Settings()).dispose()
    engine_for.cache_clear()


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("cell", CELLS.values(), ids=CELLS.keys())
def test_killed_learning_step_completes_without_repeating_an_update_or_evidence(
    cell: Cell, cell_state: str, tmp_path, monkeypatch
):
    run_id = cell_state
    service = ModelServiceProcess(tmp_path)
    service.start(hold=cell.hold)
    worker = RunWorker(tmp_path / "worker.log")
    try:
        monkeypatch.setenv("SYNTH_MODEL_SERVICE_URL", service.url)
        worker.start(run_id, 0, LEARNING_STEPS)
        wait_until_held(service, cell.hold, worker)
        _kill(cell, service, worker)
        if cell.resumes_at:
            interrupt_run(
                control_engine(Settings()),
                run_id,
                f"the {cell.killed} died",
                {"batch": batch_key(run_id, 0)},
            )
            _resolve_if_required(cell, run_id)
            _resume(cell, run_id)
    finally:
        worker.stop()
        service.stop()

    (checkpoint,) = run_checkpoints(control_engine(Settings()), run_id)
    assert (checkpoint.optimizer_steps, checkpoint.dataset_cursor) == (1, 1)
    assert applied_optimizer_steps(checkpoint.state_path) == 1
    assert acknowledged_updates(run_id) == 1
    assert get_run(control_engine(Settings()), run_id).status == "succeeded"
    evidence = audit_evidence(run_id)
    attempts = PLAN["groups_per_batch"] * PLAN["attempts_per_group"]
    assert evidence.rows == evidence.unique_call_ids == evidence.calls_in_chunks
    assert list(evidence.calls_per_trial.values()) == [CALLS_PER_ATTEMPT] * attempts


STALE_LEASE_SEC = 3


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_paused_run_worker_continued_after_its_batch_was_resumed_writes_nothing(
    cell_state: str, tmp_path, monkeypatch
):
    """The stale-worker cell: the run worker is paused (SIGSTOP) while its sampler save is
    held, presumed dead (the run interrupted, which ends its claim), and the batch is
    resumed and completed by a second worker; continued (SIGCONT), the first learns from
    its next heartbeat that it was superseded and ends without writing."""
    run_id = cell_state
    monkeypatch.setenv("SYNTH_WORKER_LEASE_SEC", str(STALE_LEASE_SEC))
    service = ModelServiceProcess(tmp_path)
    service.start(hold="save_weights_for_sampler")
    worker = RunWorker(tmp_path / "worker.log")
    try:
        monkeypatch.setenv("SYNTH_MODEL_SERVICE_URL", service.url)
        worker.start(run_id, 0, LEARNING_STEPS)
        wait_until_held(service, "save_weights_for_sampler", worker)
        worker.pause()
        engine = control_engine(Settings())
        interrupt_run(engine, run_id, "the run worker stopped answering", {})
        _resume(CELLS["sampler_save_in_flight-run_worker"], run_id)
        worker.resume()
        assert worker.wait(timeout=60) == 0, worker.tail()
    finally:
        worker.stop()
        service.stop()

    assert "superseded" in worker.tail()
    engine = control_engine(Settings())
    (checkpoint,) = run_checkpoints(engine, run_id)
    assert (checkpoint.optimizer_steps, checkpoint.dataset_cursor) == (1, 1)
    assert acknowledged_updates(run_id) == 1
    first, second = run_worker_attempts(engine, run_id)[-2:]
    assert (first.status, second.status) == ("interrupted", "completed")
    completions = read_events(engine, run_id=run_id, kinds=("batch.completed",))
    assert [event.data["worker_attempt"] for event in completions] == [second.worker_attempt_id]
    assert get_run(engine, run_id).status == "succeeded"


RUN_KEY_TAG = "dagster/run_key"


def _dagster_runs(run_key: str) -> list[dg.DagsterRun]:
    with dg.DagsterInstance.get() as instance:
        return list(instance.get_runs(filters=dg.RunsFilter(tags={RUN_KEY_TAG: run_key})))


def _bound_sampler(batch: str) -> str | None:
    with dg.DagsterInstance.get() as instance:
        records = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=dg.AssetKey("policy"), asset_partitions=[batch]),
            limit=1,
        ).records
    if not records:
        return None
    return records[0].asset_materialization.metadata["sampler"].value


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_daemon_killed_after_a_checkpoint_admits_the_next_batch_once_bound_to_it(
    state, tmp_path, monkeypatch
):
    engine = control_engine(Settings())
    monkeypatch.delenv("TINKER_BASE_URL", raising=False)
    run = accept_training(training_dataset(tmp_path), {**PLAN, "batches": 2})
    first, second = DagsterDaemon(tmp_path / "daemon.log"), DagsterDaemon(tmp_path / "daemon.log")
    service = ModelServiceProcess(tmp_path)
    service.start()
    try:
        monkeypatch.setenv("SYNTH_MODEL_SERVICE_URL", service.url)
        with capture_proxy(service.url) as proxy:
            monkeypatch.setenv("SYNTH_PROXY_URL", proxy.url)
            script_one_right_one_wrong(service.url, batches=2)
            first.start()
            checkpoint = wait_for(
                lambda: batch_checkpoint(engine, run.run_id, 0), "checkpoint 0", 900, first.log
            )
            first.kill()
            # The code server finishes the batch the dead daemon launched; nothing admits
            # the next batch until a daemon runs again.
            (batch_0,) = _dagster_runs(batch_key(run.run_id, 0))
            finished = wait_for(
                lambda: (
                    (r := dg.DagsterInstance.get().get_run_by_id(batch_0.run_id))
                    and r.is_finished
                    and r
                ),
                "batch 0's Dagster run ending",
                300,
            )
            assert finished.status == dg.DagsterRunStatus.SUCCESS
            assert _dagster_runs(batch_key(run.run_id, 1)) == []

            second.start()
            bound = wait_for(
                lambda: _bound_sampler(batch_key(run.run_id, 1)), "batch 1 bound", 600, second.log
            )
            assert bound == checkpoint.sampler_path
            wait_for(
                lambda: get_run(engine, run.run_id).finished, "the run finishing", 900, second.log
            )
    finally:
        first.stop()
        second.stop()
        service.stop()

    assert get_run(engine, run.run_id).status == "succeeded"
    assert len(_dagster_runs(batch_key(run.run_id, 1))) == 1
    checkpoints = run_checkpoints(engine, run.run_id)
    assert [(c.optimizer_steps, c.dataset_cursor) for c in checkpoints] == [(1, 1), (2, 2)]
    assert applied_optimizer_steps(checkpoints[-1].state_path) == 2
    assert acknowledged_updates(run.run_id) == 2
    evidence = audit_evidence(run.run_id)
    assert evidence.rows == evidence.unique_call_ids == evidence.calls_in_chunks
    assert list(evidence.calls_per_trial.values()) == [CALLS_PER_ATTEMPT] * 4


def test_publisher_killed_between_commit_and_report_reports_the_chunk_after_restart(state):
    spool = Spool(state / "spool")
    for index in range(3):
        spool.stage(captured_call("r-report", "r-report.b0000", "a-report", index))
    assert publisher_killed_at_report(state / "spool") == -signal.SIGKILL

    reported: list[EvidenceChunk] = []
    store = open_object_store(Settings().objects_url)
    EvidencePublisher(
        spool, store, control_engine(Settings()), report=reported.append
    ).publish_pending()

    assert [(chunk.attempt_id, chunk.calls) for chunk in reported] == [("a-report", 3)]
    evidence = audit_evidence("r-report")
    assert (evidence.rows, evidence.unique_call_ids, evidence.chunks) == (3, 3, 1)
    assert spool.staged_call_ids() == [] and spool.intents() == []
