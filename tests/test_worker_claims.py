"""Claims, heartbeats and fenced writes of worker attempts, on SQLite and on PostgreSQL:
only the attempt that holds a batch writes its progress and completion; a later claim
after the lease ran out supersedes it; retried appends land once."""

import json
import time

import pytest
from sqlalchemy import Engine
from typer.testing import CliRunner

from synth_pipelines.cli.main import app
from synth_pipelines.config import Settings
from synth_pipelines.contracts.documents import validated
from synth_pipelines.contracts.run_record import RunRecord
from synth_pipelines.contracts.run_spec import batch_key
from synth_pipelines.control.database import control_engine
from synth_pipelines.control.events import read_events
from synth_pipelines.control.run_lifecycle import cancel_run, interrupt_run, resume_run
from synth_pipelines.control.worker_attempts import (
    ClaimRefusedError,
    ProgressBoundaryError,
    StaleWorkerError,
    append_progress,
    claim_batch,
    complete_batch,
    run_worker_attempts,
)
from synth_pipelines.control.worker_claim import WorkerClaim
from tests.claimed_runs import running_evaluation
from tests.recorded_batches import WORKER

SHORT_LEASE = 0.3


def _claim(engine: Engine, run: RunRecord, index: int = 0, lease: float = 60) -> WorkerClaim:
    worker = WORKER.model_copy(update={"worker": f"worker {time.monotonic_ns()}"})
    return WorkerClaim(engine, claim_batch(engine, run.spec, index, worker, lease_sec=lease), lease)


def _kinds(engine: Engine, run: RunRecord) -> list[str]:
    return [event.kind for event in read_events(engine, run_id=run.run_id)]


def test_a_held_batch_cannot_be_claimed_again(either_database):
    engine = either_database
    run = running_evaluation(engine)
    first = _claim(engine, run)
    with pytest.raises(ClaimRefusedError, match=f"held by worker {first.attempt.worker}"):
        _claim(engine, run)
    assert [a.status for a in run_worker_attempts(engine, run.run_id)] == ["active"]


def test_a_worker_back_after_its_lease_was_superseded_is_refused_and_the_refusal_recorded(
    either_database,
):
    engine = either_database
    run = running_evaluation(engine)
    stale = _claim(engine, run, lease=SHORT_LEASE)
    stale.append("batch.started", {"batch": stale.attempt.batch, "attempt_ids": ["a0", "a1"]})
    stale.append("attempt.finished", {"attempt_id": "a0"})
    time.sleep(SHORT_LEASE * 2)
    later = _claim(engine, run)

    with pytest.raises(StaleWorkerError, match="superseded"):
        stale.append("attempt.finished", {"attempt_id": "a1"})
    with pytest.raises(StaleWorkerError):
        stale.complete(run.spec, {"passed": 2})
    assert stale.heartbeat().action == "superseded"
    assert later.complete(run.spec, {"passed": 1})

    events = read_events(engine, run_id=run.run_id)
    (superseded,) = [e for e in events if e.kind == "worker.superseded"]
    assert superseded.data["platform_errors"] == ["a1"]
    assert superseded.data["finished_attempts"] == 1
    refused = [e.data["tried"] for e in events if e.kind == "worker.refused"]
    assert refused == ["attempt.finished", "batch.completed"]
    (completed,) = [e for e in events if e.kind == "batch.completed"]
    assert completed.data["worker_attempt"] == later.attempt.worker_attempt_id
    statuses = [(a.attempt_number, a.status) for a in run_worker_attempts(engine, run.run_id)]
    assert statuses == [(1, "superseded"), (2, "completed")]


def test_a_retried_progress_append_lands_once(either_database):
    engine = either_database
    run = running_evaluation(engine)
    claim = _claim(engine, run)
    data = {"attempt_id": "a0", "status": "completed"}
    first = append_progress(engine, claim.attempt, 1, "attempt.finished", data)
    again = append_progress(engine, claim.attempt, 1, "attempt.finished", data)
    assert first == again
    assert _kinds(engine, run).count("attempt.finished") == 1
    # The worker sent one event: its completion's boundary holds.
    assert complete_batch(engine, claim.attempt, run.spec, progress_seq=1, summary={})


def test_completion_checks_the_final_event_boundary(either_database):
    engine = either_database
    run = running_evaluation(engine)
    claim = _claim(engine, run)
    claim.append("batch.started", {})
    with pytest.raises(ProgressBoundaryError, match="sent 2 progress events, the database holds 1"):
        complete_batch(engine, claim.attempt, run.spec, progress_seq=2, summary={})
    assert "batch.completed" not in _kinds(engine, run)
    assert claim.complete(run.spec, {})


def test_heartbeats_renew_the_lease_and_carry_cancellation(either_database):
    engine = either_database
    run = running_evaluation(engine)
    claim = _claim(engine, run, lease=SHORT_LEASE * 2)
    for _ in range(3):
        time.sleep(SHORT_LEASE)
        assert claim.heartbeat().action == "continue"
    with pytest.raises(ClaimRefusedError, match="held by"):
        _claim(engine, run)
    assert cancel_run(engine, run.run_id, "the operator cancelled it")
    beat = claim.heartbeat()
    assert (beat.action, beat.reason) == ("cancel", "run is cancelled")
    claim.append("attempt.finished", {"attempt_id": "a0"})
    claim.end("cancelled", beat.reason)
    (ended,) = [e for e in read_events(engine, run_id=run.run_id) if e.kind == "worker.cancelled"]
    assert ended.data["progress"] == {"attempt.finished": 1}
    assert run_worker_attempts(engine, run.run_id)[0].status == "cancelled"


def test_an_interrupted_run_ends_its_workers_so_a_resumed_batch_is_claimed_anew(either_database):
    engine = either_database
    run = running_evaluation(engine)
    dead = _claim(engine, run)
    interrupt_run(engine, run.run_id, "the run worker died", {})
    with pytest.raises(StaleWorkerError, match="it is interrupted"):
        dead.append("attempt.finished", {"attempt_id": "a0"})
    assert resume_run(engine, run.run_id) == 0
    resumed = _claim(engine, run)
    assert resumed.attempt.attempt_number == 2
    assert resumed.complete(run.spec, {})


def test_claims_wait_for_prerequisites_and_check_what_the_worker_advertises(either_database):
    engine = either_database
    run = running_evaluation(engine)
    with pytest.raises(ClaimRefusedError, match="batch 0 is not completed"):
        _claim(engine, run, index=1)
    lacking = WORKER.model_copy(update={"engines": ("builtin",), "providers": ("docker",)})
    with pytest.raises(ClaimRefusedError, match="lacks engine oracle, sandbox provider local"):
        claim_batch(engine, run.spec, 0, lacking, lease_sec=60)
    assert run_worker_attempts(engine, run.run_id) == []
    assert _claim(engine, run).complete(run.spec, {})
    with pytest.raises(ClaimRefusedError, match=f"{batch_key(run.run_id, 0)} is already completed"):
        _claim(engine, run, index=0)
    cancel_run(engine, run.run_id, "enough")
    with pytest.raises(ClaimRefusedError, match="is cancelled"):
        _claim(engine, run, index=1)


def test_run_workers_shows_every_claim_and_how_it_ended(state, cli_gateway):
    engine = control_engine(Settings())
    run = running_evaluation(engine, owner=Settings().owner)
    stale = _claim(engine, run, lease=SHORT_LEASE)
    time.sleep(SHORT_LEASE * 2)
    _claim(engine, run).complete(run.spec, {})

    shown = CliRunner().invoke(app, ["run", "workers", run.run_id, "--json"])
    assert shown.exit_code == 0, shown.output
    document = json.loads(shown.stdout)
    assert document == validated("run workers", document)
    assert [(a["attempt_number"], a["status"]) for a in document] == [
        (1, "superseded"),
        (2, "completed"),
    ]
    assert document[0]["worker"] == stale.attempt.worker
    assert document[0]["end_reason"].startswith("lease expired at")
    table = CliRunner().invoke(app, ["run", "workers", run.run_id])
    assert table.exit_code == 0 and "superseded" in table.stdout, table.output
