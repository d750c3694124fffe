"""Run and batch lifecycle facts, written where the work happens."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine

from synth_pipelines.contracts.run_spec import RunSpec, batch_key
from synth_pipelines.control.events import record_event
from synth_pipelines.control.runs import get_run, transition


class RunNotActiveError(RuntimeError):
    pass


def start_batch(engine: Engine, spec: RunSpec, index: int, attempts: int) -> None:
    run = get_run(engine, spec.run_id)
    if run.finished:
        raise RunNotActiveError(f"run {spec.run_id} is {run.status}; batch {index} will not start")
    transition(engine, spec.run_id, "running", "run.started", {}, from_status=("accepted",))
    record_event(
        engine,
        spec.run_id,
        "batch.started",
        {"batch": batch_key(spec.run_id, index), "index": index, "attempts": attempts},
    )


def complete_batch(engine: Engine, spec: RunSpec, index: int, summary: dict[str, Any]) -> None:
    record_event(
        engine,
        spec.run_id,
        "batch.completed",
        {"batch": batch_key(spec.run_id, index), "index": index, **summary},
    )
    if index == spec.batch_count - 1:
        transition(engine, spec.run_id, "succeeded", "run.succeeded", {"batches": spec.batch_count})


def fail_run(engine: Engine, run_id: str, reason: str, data: dict[str, Any]) -> None:
    transition(engine, run_id, "failed", "run.failed", {"reason": reason, **data})
