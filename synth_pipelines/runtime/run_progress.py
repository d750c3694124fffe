"""A run's counts so far (`run progress`), from its events: `batch.completed` (batches),
`attempt.finished` (attempts and passes), `update.acknowledged`/`batch.no_signal` (the last
batch's reward mean and whether its optimizer step was applied) and `warm_start.step` (a
warm start's supervised steps)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine

from synth_pipelines.contracts.assessment import passed
from synth_pipelines.contracts.documents import RunProgressDocument
from synth_pipelines.contracts.run_record import RunRecord
from synth_pipelines.control.events import read_events
from synth_pipelines.runtime.run_reports import event_reward


def _attempts_total(run: RunRecord) -> int:
    spec = run.spec
    if run.kind == "warm_start":
        return 0
    if run.kind == "train":
        return run.batch_count * spec.tasks_per_batch * spec.attempts_per_task
    return spec.task_limit * spec.attempts_per_task


def _count(counts: dict[str, Any], kind: str, data: dict[str, Any]) -> None:
    if kind == "batch.completed":
        counts["batches_done"] += 1
    elif kind == "attempt.finished":
        counts["attempts_done"] += 1
        counts["passed"] += passed(event_reward(data.get("rewards")))
    elif kind == "update.acknowledged":
        counts["reward_mean"] = data.get("reward_mean")
        counts["step_applied"] = bool(data.get("optimizer_step"))
    elif kind == "batch.no_signal":
        counts["step_applied"] = False
    elif kind == "warm_start.step":
        counts["steps_done"] = data["step"]


def run_progress(engine: Engine, run: RunRecord) -> RunProgressDocument:
    """The counts after every event `run` recorded so far, with its status."""
    plan = run.spec.plan
    warm = plan.kind == "warm_start"
    counts: dict[str, Any] = {
        "run_id": run.run_id,
        "kind": run.kind,
        "status": run.status,
        "batches_done": 0,
        "batches_total": run.batch_count,
        "attempts_done": 0,
        "attempts_total": _attempts_total(run),
        "passed": 0,
        "reward_mean": None,
        "step_applied": None,
        "steps_done": 0 if warm else None,
        "steps_total": plan.steps if plan.kind == "warm_start" else None,
    }
    cursor = 0
    while events := read_events(engine, run_id=run.run_id, after=cursor):
        for event in events:
            cursor = event.seq
            _count(counts, event.kind, event.data)
    return RunProgressDocument.model_validate(counts)
