"""Workers as real processes on PostgreSQL: one killed with SIGKILL holds its batch until
its lease runs out, then a second claims it; one paused with SIGSTOP is superseded by a
second that completes the batch and, continued with SIGCONT, has its append and its
completion refused. The run shows the refusals, the supersession and one completion."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import Engine

from synth_pipelines.contracts.run_record import RunRecord
from synth_pipelines.control.database import engine_for
from synth_pipelines.control.events import read_events
from synth_pipelines.control.worker_attempts import (
    ClaimRefusedError,
    claim_batch,
    run_worker_attempts,
)
from tests.claimed_runs import running_evaluation
from tests.conftest import PROJECT_ROOT
from tests.recorded_batches import WORKER as TEST_WORKER

LEASE_SEC = 5.0

# A worker of the test's own: it claims batch 0, starts two attempts and finishes one,
# then waits for `go` to exist and tries to finish the other and complete the batch.
WORKER_PROCESS = """
import json, sys, time
from pathlib import Path
from synth_pipelines.config import Settings
from synth_pipelines.control.database import control_engine
from synth_pipelines.control.runs import get_run
from synth_pipelines.control.worker_attempts import StaleWorkerError, claim_batch
from synth_pipelines.control.worker_claim import WorkerClaim
from tests.recorded_batches import WORKER

engine = control_engine(Settings())
spec = get_run(engine, sys.argv[1]).spec
lease, go = float(sys.argv[2]), Path(sys.argv[3])
worker = WORKER.model_copy(update={"worker": f"test worker {sys.argv[4]}"})
claim = WorkerClaim(engine, claim_batch(engine, spec, 0, worker, lease_sec=lease), lease)
claim.append("batch.started", {"batch": claim.attempt.batch, "attempt_ids": ["a0", "a1"]})
claim.append("attempt.finished", {"attempt_id": "a0"})
print(claim.attempt.worker_attempt_id, flush=True)
while not go.exists():
    time.sleep(0.05)
tried = {}
for what, write in (
    ("append", lambda: claim.append("attempt.finished", {"attempt_id": "a1"})),
    ("complete", lambda: claim.complete(spec, {"passed": 2})),
):
    try:
        tried[what] = write()
    except StaleWorkerError as refused:
        tried[what] = f"refused: {refused}"
print(json.dumps(tried), flush=True)
"""


def _worker(url: str, run: RunRecord, go: Path, name: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", WORKER_PROCESS, run.run_id, str(LEASE_SEC), str(go), name],
        cwd=PROJECT_ROOT,
        env={**os.environ, "SYNTH_DATABASE_URL": url},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _claimed(worker: subprocess.Popen) -> str:
    assert worker.stdout is not None
    line = worker.stdout.readline().strip()
    assert line, worker.stderr.read() if worker.stderr else ""
    return line


def _finished(worker: subprocess.Popen) -> dict:
    out, err = worker.communicate(timeout=60)
    assert worker.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1])


@pytest.fixture
def postgres_url(postgres_server) -> str:
    return postgres_server.create_database("stale")


@pytest.mark.timeout(300)
def test_a_killed_worker_holds_its_batch_until_its_lease_runs_out(postgres_url, tmp_path):
    engine = engine_for(postgres_url)
    run = running_evaluation(engine)
    killed = _worker(postgres_url, run, tmp_path / "never", "killed")
    first = _claimed(killed)
    killed.send_signal(signal.SIGKILL)
    killed.wait(timeout=30)

    held = f"held by worker test worker killed \\(worker attempt {first}\\)"
    with pytest.raises(ClaimRefusedError, match=held):
        claim_batch(engine, run.spec, 0, TEST_WORKER, lease_sec=LEASE_SEC)

    time.sleep(LEASE_SEC)
    (tmp_path / "go").touch()
    third = _worker(postgres_url, run, tmp_path / "go", "third")
    later = _claimed(third)
    assert _finished(third) == {"append": _seq(engine, run, later, 3), "complete": True}
    events = read_events(engine, run_id=run.run_id)
    (superseded,) = [e for e in events if e.kind == "worker.superseded"]
    assert (superseded.data["worker_attempt"], superseded.data["platform_errors"]) == (
        first,
        ["a1"],
    )
    assert [e.data["worker_attempt"] for e in events if e.kind == "batch.completed"] == [later]


def _seq(engine: Engine, run: RunRecord, attempt: str, local_seq: int) -> int:
    (event,) = [
        e
        for e in read_events(engine, run_id=run.run_id)
        if e.data.get("worker_attempt") == attempt and e.data.get("local_seq") == local_seq
    ]
    return event.seq


@pytest.mark.timeout(300)
def test_a_paused_worker_continued_after_a_later_claim_is_refused_on_append_and_completion(
    postgres_url, tmp_path
):
    engine = engine_for(postgres_url)
    run = running_evaluation(engine)
    go = tmp_path / "go"
    paused = _worker(postgres_url, run, go, "paused")
    stale = _claimed(paused)
    paused.send_signal(signal.SIGSTOP)
    try:
        time.sleep(LEASE_SEC * 1.5)
        go.touch()
        later = _worker(postgres_url, run, go, "later")
        current = _claimed(later)
        assert _finished(later) == {"append": _seq(engine, run, current, 3), "complete": True}
    finally:
        paused.send_signal(signal.SIGCONT)
    tried = _finished(paused)
    assert tried["append"].startswith(f"refused: worker attempt {stale} may not write")
    assert tried["complete"].startswith("refused:") and f"held by {current}" in tried["complete"]

    events = read_events(engine, run_id=run.run_id)
    refused = [
        (e.data["worker_attempt"], e.data["tried"]) for e in events if e.kind == "worker.refused"
    ]
    assert refused == [(stale, "attempt.finished"), (stale, "batch.completed")]
    assert [e.data["worker_attempt"] for e in events if e.kind == "batch.completed"] == [current]
    finished_a1 = [
        e.data["worker_attempt"]
        for e in events
        if e.kind == "attempt.finished" and e.data["attempt_id"] == "a1"
    ]
    assert finished_a1 == [current]
    assert [(a.worker_attempt_id, a.status) for a in run_worker_attempts(engine, run.run_id)] == [
        (stale, "superseded"),
        (current, "completed"),
    ]
