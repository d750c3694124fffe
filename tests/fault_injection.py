"""Processes a fault test kills with SIGKILL, and the ledgers it reads afterwards.

The model service and the run worker are real processes: the model service is
`tests.held_model_service` (the scripted service, optionally holding one step), the run
worker runs a training batch's Dagster job as the daemon's run worker would. After a kill
the ledgers say what happened: how many optimizer steps the saved trainer state has
applied (Adam's own step count), how many updates the control database acknowledged, and
whether every evidence row is one call, published once, in a chunk whose checksum holds.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import httpx
from sqlalchemy import select

from synth_pipelines.config import Settings
from synth_pipelines.contracts.interaction import Interaction
from synth_pipelines.contracts.run_spec import batch_key
from synth_pipelines.contracts.table import parquet_to_table
from synth_pipelines.control.database import control_engine
from synth_pipelines.control.events import read_events
from synth_pipelines.control.schema import evidence_calls, evidence_chunks, policy_updates
from synth_pipelines.definitions import definitions
from synth_pipelines.storage.objectstore import open_object_store
from synth_pipelines.tinker_local.checkpoints import CheckpointPath, CheckpointStore
from tests.conftest import PROJECT_ROOT
from tests.production_services import free_port

START_TIMEOUT_SEC = 180.0

WORKER = """
import sys
from tests.fault_injection import run_steps
sys.exit(0 if run_steps(sys.argv[1], int(sys.argv[2]), tuple(sys.argv[3:])).success else 1)
"""


def run_steps(run_id: str, index: int, steps: tuple[str, ...]) -> dg.ExecuteInProcessResult:
    """The steps of a training batch's job, as the gate requests them for a resumed batch."""
    key = batch_key(run_id, index)
    instance = dg.DagsterInstance.get()
    if not instance.has_dynamic_partition("batches", key):
        instance.add_dynamic_partitions("batches", [key])
    return (
        definitions(Settings())
        .resolve_job_def("training_batch")
        .execute_in_process(
            partition_key=key,
            instance=instance,
            asset_selection=[dg.AssetKey(step) for step in steps],
            raise_on_error=False,
        )
    )


PUBLISHER_DYING_AT_REPORT = """
import os
import signal
import sys
from pathlib import Path
from synth_pipelines.config import Settings
from synth_pipelines.control.database import control_engine
from synth_pipelines.evidence.publisher import EvidencePublisher
from synth_pipelines.evidence.spool import Spool
from synth_pipelines.storage.objectstore import open_object_store
EvidencePublisher(
    Spool(Path(sys.argv[1])),
    open_object_store(Settings().objects_url),
    control_engine(Settings()),
    report=lambda chunk: os.kill(os.getpid(), signal.SIGKILL),
).publish_pending(everything=True)
"""


def publisher_killed_at_report(spool_dir: Path) -> int:
    """Publish the spool in a process that dies the moment it reports a chunk."""
    return subprocess.run(
        [sys.executable, "-c", PUBLISHER_DYING_AT_REPORT, str(spool_dir)],
        cwd=PROJECT_ROOT,
        env=os.environ.copy(),
        timeout=120,
    ).returncode


def captured_call(run_id: str, batch: str, attempt_id: str, index: int) -> Interaction:
    """One call as the proxy stages it, with the sampler's tokens and logprobs."""
    return Interaction(
        call_id=f"{attempt_id}-call-{index}",
        run_id=run_id,
        batch=batch,
        attempt_id=attempt_id,
        trial_id="trial-1",
        owner=Settings().owner,
        role="actor",
        agent_id="main",
        parent_agent_id=None,
        agent_type=None,
        native_session_id=None,
        call_index=index,
        model="synth/qwen3-tiny",
        sampler="synth/qwen3-tiny",
        temperature=1.0,
        prompt_tokens=[1, 2, 3],
        completion_tokens=[4, 5],
        logprobs=[-0.5, -0.25],
        sampler_stop_reason="stop",
        stop_reason="end_turn",
        parse_error=False,
        fitted=False,
        request_json="{}",
        effective_request_json=None,
        response_json="{}",
        render_ms=1.0,
        sample_ms=1.0,
        parse_ms=1.0,
        total_ms=3.0,
        created_at=datetime.now(UTC),
    )


def _kill_group(process: subprocess.Popen) -> None:
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()


@dataclass
class ModelServiceProcess:
    """One port and one journal, across every incarnation of the service."""

    root: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen | None = None
    starts: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def journal(self) -> Path:
        return self.root / "model-service.journal"

    def start(self, hold: str | None = None) -> None:
        self.starts += 1
        argv = [sys.executable, "-m", "tests.held_model_service"]
        argv += ["--port", str(self.port), "--journal", str(self.journal)]
        argv += ["--hold", hold] if hold else []
        with (self.root / f"model-service-{self.starts}.log").open("w") as log:
            self.process = subprocess.Popen(
                argv,
                cwd=PROJECT_ROOT,
                env={**os.environ, "TINKER_TELEMETRY": "0"},
                start_new_session=True,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + START_TIMEOUT_SEC
        while time.monotonic() < deadline and self.process.poll() is None:
            try:
                if httpx.get(f"{self.url}/api/v1/healthz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.3)
        raise AssertionError(f"the model service did not start on {self.url}")

    def kill(self) -> None:
        assert self.process is not None
        _kill_group(self.process)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.kill()

    def lines(self, kind: str, step: str) -> int:
        """How often any incarnation journaled `kind` ("request" or "held") for `step`."""
        if not self.journal.exists():
            return 0
        return sum(
            line.split(" ", 1)[1] == f"{kind} {step}"
            for line in self.journal.read_text().splitlines()
        )


@dataclass
class RunWorker:
    """A training batch's Dagster job in its own process, as a run worker executes it."""

    log: Path
    process: subprocess.Popen | None = None

    def start(self, run_id: str, index: int, steps: tuple[str, ...] = ()) -> None:
        with self.log.open("w") as sink:
            self.process = subprocess.Popen(
                [sys.executable, "-c", WORKER, run_id, str(index), *steps],
                cwd=PROJECT_ROOT,
                env=os.environ.copy(),
                start_new_session=True,
                stdout=sink,
                stderr=subprocess.STDOUT,
            )

    def kill(self) -> None:
        assert self.process is not None
        _kill_group(self.process)

    def pause(self) -> None:
        assert self.process is not None
        os.killpg(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self.process is not None
        os.killpg(self.process.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.kill()

    def wait(self, timeout: float) -> int:
        assert self.process is not None
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(
                f"the run worker did not stop within {timeout:.0f} s:\n{self.tail()}"
            ) from None

    def tail(self) -> str:
        return self.log.read_text()[-3000:] if self.log.exists() else ""


@dataclass
class DagsterDaemon:
    """`dagster-daemon run` on the project's `workspace.yaml`, which loads the definitions in
    a code server of the daemon's own. Killing the daemon kills it alone: its code server
    finishes the runs it launched."""

    log: Path
    process: subprocess.Popen | None = None

    def start(self) -> None:
        daemon = str(Path(sys.executable).parent / "dagster-daemon")
        with self.log.open("a") as sink:
            self.process = subprocess.Popen(
                [daemon, "run", "-w", str(PROJECT_ROOT / "workspace.yaml")],
                cwd=PROJECT_ROOT,
                env={**os.environ, "TINKER_TELEMETRY": "0"},
                start_new_session=True,
                stdout=sink,
                stderr=subprocess.STDOUT,
            )

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def stop(self) -> None:
        """Everything it started, the code server and its run workers included."""
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


def wait_for[T](
    condition: Callable[[], T | None], what: str, timeout: float, log: Path | None = None
) -> T:
    """The first true value of `condition`, polled until `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.3)
    tail = log.read_text()[-3000:] if log is not None and log.exists() else ""
    raise AssertionError(f"{what} did not happen within {timeout:.0f} s\n{tail}")


def wait_until_held(
    service: ModelServiceProcess, step: str, worker: RunWorker, timeout: float = 600
) -> None:
    deadline = time.monotonic() + timeout
    assert worker.process is not None
    while time.monotonic() < deadline and worker.process.poll() is None:
        if service.lines("held", step):
            return
        time.sleep(0.3)
    raise AssertionError(f"the run worker never reached {step}:\n{worker.tail()}")


def applied_optimizer_steps(state_path: str) -> int:
    """Adam's step count saved with the trainer state: every optimizer step the state's
    lineage applied, whichever service process applied it."""
    store = CheckpointStore(open_object_store(Settings().objects_url))
    optimizer = store.load(CheckpointPath.parse(state_path)).optimizer
    assert optimizer, f"{state_path} has no optimizer state"
    steps = {int(value) for name, value in optimizer.items() if name.endswith(".step")}
    assert len(steps) == 1, f"{state_path}: parameters disagree on the step count: {steps}"
    return steps.pop()


def acknowledged_updates(run_id: str) -> int:
    with control_engine(Settings()).connect() as conn:
        statuses = conn.execute(
            select(policy_updates.c.status).where(policy_updates.c.run_id == run_id)
        ).scalars()
        acknowledged = sum(status == "acknowledged" for status in statuses)
    events = read_events(control_engine(Settings()), run_id=run_id, kinds=("update.acknowledged",))
    assert len(events) == acknowledged, (events, acknowledged)
    return acknowledged


@dataclass(frozen=True)
class EvidenceAudit:
    rows: int
    unique_call_ids: int
    calls_in_chunks: int
    chunks: int
    calls_per_trial: dict[str, int]


def audit_evidence(run_id: str) -> EvidenceAudit:
    """Every evidence row against the chunk it names, each chunk read with its checksum."""
    store = open_object_store(Settings().objects_url)
    with control_engine(Settings()).connect() as conn:
        rows = conn.execute(
            select(evidence_calls.c.call_id).where(evidence_calls.c.run_id == run_id)
        ).scalars()
        call_ids = list(rows)
        chunks = conn.execute(
            select(evidence_chunks.c.chunk_key, evidence_chunks.c.sha256).where(
                evidence_chunks.c.run_id == run_id
            )
        ).all()
    published: list[Interaction] = []
    for chunk in chunks:
        data = store.get(chunk.chunk_key, expected_sha256=chunk.sha256)
        published.extend(Interaction.from_table(parquet_to_table(data)))
    published_ids = {call.call_id for call in published}
    assert published_ids == set(call_ids), "evidence rows and published calls differ"
    return EvidenceAudit(
        rows=len(call_ids),
        unique_call_ids=len(set(call_ids)),
        calls_in_chunks=len(published),
        chunks=len(chunks),
        calls_per_trial=dict(Counter(call.trial_id or "" for call in published)),
    )
