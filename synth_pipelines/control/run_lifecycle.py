"""Run and batch lifecycle facts, written where the work happens."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import Engine, select

from synth_pipelines.contracts.run_record import ACTIVE
from synth_pipelines.contracts.run_spec import RunSpec, batch_key
from synth_pipelines.control.database import exclusive_transaction, named_lock
from synth_pipelines.control.events import append_event, read_events, record_event
from synth_pipelines.control.policy_updates import refuse_if_unresolved
from synth_pipelines.control.runs import get_run, transition, transition_in
from synth_pipelines.control.schema import run_events, runs


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


def complete_batch(engine: Engine, spec: RunSpec, index: int, summary: dict[str, Any]) -> bool:
    """Record a batch as done, once, however often its last step is materialized, and only
    while its run is active: a cancelled or interrupted run records no completion after.

    The check and the record are one transaction that excludes every other completion of
    the run, so two racing (a retried step beside a worker presumed dead) record one.
    Returns whether this call recorded it."""
    key = batch_key(spec.run_id, index)
    with exclusive_transaction(engine, named_lock(f"completion:{spec.run_id}")) as conn:
        status = conn.execute(select(runs.c.status).where(runs.c.run_id == spec.run_id)).scalar()
        done = conn.execute(
            select(run_events.c.data_json).where(
                run_events.c.run_id == spec.run_id, run_events.c.kind == "batch.completed"
            )
        ).scalars()
        if status not in ACTIVE or any(json.loads(data)["batch"] == key for data in done):
            return False
        append_event(
            conn, spec.run_id, "batch.completed", {"batch": key, "index": index, **summary}
        )
        if index == spec.batch_count - 1:
            transition_in(
                conn, spec.run_id, "succeeded", "run.succeeded", {"batches": spec.batch_count}
            )
    return True


def interrupt_run(engine: Engine, run_id: str, reason: str, data: dict[str, Any]) -> None:
    """A batch failed: the run stops where it is and can be resumed after a look."""
    transition(
        engine,
        run_id,
        "interrupted",
        "run.interrupted",
        {"reason": reason, **data},
        from_status=ACTIVE,
    )


def resume_run(engine: Engine, run_id: str) -> int:
    """Ask the batch gate to relaunch an interrupted run's unfinished batch."""
    refuse_if_unresolved(engine, run_id)
    run = get_run(engine, run_id)
    if run.status != "interrupted":
        raise RunNotActiveError(f"run {run_id} is {run.status}; only an interrupted run resumes")
    completed = len(read_events(engine, run_id=run_id, kinds=("batch.completed",), limit=100_000))
    transition(
        engine,
        run_id,
        "running",
        "run.resumed",
        {"batch": batch_key(run_id, completed)},
        from_status=("interrupted",),
    )
    return completed


def cancel_run(engine: Engine, run_id: str, reason: str) -> bool:
    return transition(
        engine,
        run_id,
        "cancelled",
        "run.cancelled",
        {"reason": reason},
        from_status=(*ACTIVE, "interrupted"),
    )
