"""Run and batch lifecycle facts, written where the work happens."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine

from synth_pipelines.contracts.run_record import ACTIVE
from synth_pipelines.contracts.run_spec import batch_key
from synth_pipelines.control.database import exclusive_transaction
from synth_pipelines.control.events import read_events
from synth_pipelines.control.policy_updates import refuse_if_unresolved
from synth_pipelines.control.runs import get_run, transition, transition_in
from synth_pipelines.control.worker_attempts import end_active_attempts, worker_lock


class RunNotActiveError(RuntimeError):
    pass


def interrupt_run(engine: Engine, run_id: str, reason: str, data: dict[str, Any]) -> None:
    """A batch failed: the run stops where it is and can be resumed after a look. The
    worker attempts that held its batches end with it, so a worker that was presumed
    dead and comes back writes nothing more, and the resumed batch is claimed anew."""
    with exclusive_transaction(engine, worker_lock(run_id)) as conn:
        if transition_in(
            conn,
            run_id,
            "interrupted",
            "run.interrupted",
            {"reason": reason, **data},
            from_status=ACTIVE,
        ):
            end_active_attempts(conn, run_id, "interrupted", f"the run was interrupted: {reason}")


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
