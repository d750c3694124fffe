"""Each batch's results, tallied when its trials or assessments are stored.

A run's results are then read from one row per batch instead of from every batch's
tables. A row is recomputed from the batch's current tables whenever one of them is
stored again (a retry, a resume, a regrade) and replaces the previous one, so a repeated
write cannot count twice.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime

import pyarrow as pa
from pydantic import BaseModel
from sqlalchemy import Engine, select
from sqlalchemy.dialects import postgresql, sqlite

from synth_pipelines.contracts.assessment import Assessment, passed
from synth_pipelines.contracts.run_spec import parse_batch_key
from synth_pipelines.contracts.trial import TrialOutcome
from synth_pipelines.control.schema import batch_results

REASON_CHARS = 300


def reason_key(kind: str, reason: str | None) -> str:
    """`class: reason`, the reason cut to its first line."""
    first = (reason or "").splitlines()[:1]
    return f"{kind}: {first[0][:REASON_CHARS] if first else ''}"


class Tally(BaseModel):
    """Attempts by outcome class. Every error reason is counted, in the order first seen,
    so that tallies add up to what one count over all their attempts would give."""

    attempts: int = 0
    assessed: int = 0
    passed: int = 0
    reward_sum: float = 0.0
    platform_errors: int = 0
    task_errors: int = 0
    error_reasons: dict[str, int] = {}

    def __add__(self, other: Tally) -> Tally:
        reasons = Counter(self.error_reasons)
        reasons.update(other.error_reasons)
        return Tally(
            attempts=self.attempts + other.attempts,
            assessed=self.assessed + other.assessed,
            passed=self.passed + other.passed,
            reward_sum=self.reward_sum + other.reward_sum,
            platform_errors=self.platform_errors + other.platform_errors,
            task_errors=self.task_errors + other.task_errors,
            error_reasons=dict(reasons),
        )


def _tally(attempts: int, rewards: list[float], errors: list[tuple[str, str | None]]) -> Tally:
    return Tally(
        attempts=attempts,
        assessed=len(rewards),
        passed=sum(passed(r) for r in rewards),
        reward_sum=sum(rewards),
        platform_errors=sum(kind == "platform" for kind, _ in errors),
        task_errors=sum(kind == "task" for kind, _ in errors),
        error_reasons=dict(Counter(reason_key(kind, reason) for kind, reason in errors)),
    )


def tally_assessments(assessments: list[Assessment]) -> Tally:
    """Only valid assessments with a reward are assessed; invalid ones are errors."""
    rewards = [a.reward for a in assessments if a.valid and a.reward is not None]
    errors = [(a.error_class or "task", a.reason) for a in assessments if not a.valid]
    return _tally(len(assessments), rewards, errors)


def tally_outcomes(outcomes: list[TrialOutcome]) -> Tally:
    """Actor-only execution: nothing is assessed; errors are counted as for evaluations."""
    errors = [(o.error_class, o.error_reason) for o in outcomes if o.error_class is not None]
    return _tally(len(outcomes), [], errors)


class TaskAttempts(BaseModel):
    """One task's attempts in a batch, in the order the batch's table holds them."""

    task_name: str
    attempts: int = 0
    rewards: list[float | None] = []
    trial_keys: list[str] = []
    failures: list[str] = []


class BatchResults(BaseModel):
    outcomes: Tally
    """The trials, counted as an execution without assessments counts them."""
    assessments: Tally
    """The current assessments; `attempts == 0` while there are none."""
    tasks: list[TaskAttempts]


def _failure(outcome: TrialOutcome) -> str | None:
    if outcome.error_class:
        return f"{outcome.attempt_id}: {outcome.error_class} error: {outcome.error_reason}"
    if outcome.exception_type:
        return f"{outcome.attempt_id}: {outcome.exception_type}"
    return None


def batch_results_of(outcomes: list[TrialOutcome], judged: list[Assessment]) -> BatchResults:
    reward_of = {a.attempt_id: a.reward for a in judged}
    by_task: dict[str, TaskAttempts] = {}
    for outcome in outcomes:
        task = by_task.setdefault(outcome.task_name, TaskAttempts(task_name=outcome.task_name))
        task.attempts += 1
        task.rewards.append(reward_of.get(outcome.attempt_id))
        task.trial_keys.append(outcome.trial_key)
        if (failure := _failure(outcome)) is not None:
            task.failures.append(failure)
    return BatchResults(
        outcomes=tally_outcomes(outcomes),
        assessments=tally_assessments(judged),
        tasks=list(by_task.values()),
    )


def record_batch_results(
    engine: Engine,
    partition: str,
    trials: pa.Table,
    assessments: pa.Table | None,
    *,
    replace: bool = True,
) -> BatchResults:
    """Tally a batch from its current trials and assessments tables, replacing its row;
    with `replace=False` only where the batch has no row yet."""
    run_id, index = parse_batch_key(partition)
    judged = Assessment.from_table(assessments) if assessments is not None else []
    results = batch_results_of(TrialOutcome.from_table(trials), judged)
    values = {"results_json": results.model_dump_json(), "recorded_at": datetime.now(UTC)}
    # An upsert, so two writers storing the same batch's tables at once both succeed (the
    # later one's tally, from the same or newer tables, is kept). A reader filling in a
    # missing tally may have read the tables before a writer stored newer ones, so its
    # tally never replaces a row: it would undo the writer's.
    dialect = postgresql if engine.dialect.name == "postgresql" else sqlite
    statement = dialect.insert(batch_results).values(run_id=run_id, batch_index=index, **values)
    keys = ["run_id", "batch_index"]
    statement = (
        statement.on_conflict_do_update(index_elements=keys, set_=values)
        if replace
        else statement.on_conflict_do_nothing(index_elements=keys)
    )
    with engine.begin() as conn:
        conn.execute(statement)
    return results


def read_batch_results(engine: Engine, run_id: str) -> dict[int, BatchResults]:
    """The tallied batches of a run, by batch index."""
    with engine.connect() as conn:
        rows = conn.execute(
            select(batch_results.c.batch_index, batch_results.c.results_json).where(
                batch_results.c.run_id == run_id
            )
        ).all()
    return {row.batch_index: BatchResults.model_validate_json(row.results_json) for row in rows}
