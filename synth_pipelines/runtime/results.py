"""What a run produced: per-task attempts and rewards, pass rate, where the work is."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

from sqlalchemy import Engine

from synth_pipelines.contracts.assessment import Assessment, passed
from synth_pipelines.contracts.run_record import RunRecord
from synth_pipelines.contracts.run_spec import batch_key
from synth_pipelines.contracts.trial import TrialOutcome
from synth_pipelines.control.batch_results import (
    BatchResults,
    Tally,
    read_batch_results,
    tally_assessments,
    tally_outcomes,
)
from synth_pipelines.control.table_outputs import tally_batch
from synth_pipelines.storage.objectstore import ObjectStore

REASONS_SHOWN = 5


@dataclass(frozen=True)
class Summary:
    """Attempts by outcome class: only assessed ones enter pass@1 and mean reward; the
    platform's errors and the tasks' are counted apart, with their most common reasons."""

    attempts: int
    assessed: int
    passed: int
    platform_errors: int
    task_errors: int
    mean_reward: float | None
    error_reasons: dict[str, int] = field(default_factory=dict)

    @property
    def pass_rate(self) -> float | None:
        return self.passed / self.assessed if self.assessed else None

    @property
    def platform_error_rate(self) -> float:
        return self.platform_errors / self.attempts if self.attempts else 0.0

    def as_dict(self) -> dict[str, object]:
        return {
            "attempts": self.attempts,
            "assessed": self.assessed,
            "passed": self.passed,
            "platform_errors": self.platform_errors,
            "task_errors": self.task_errors,
            "pass_rate": self.pass_rate,
            "mean_reward": self.mean_reward,
            "error_reasons": self.error_reasons,
        }


def summary_of(tally: Tally) -> Summary:
    """The summary of a tally, with its most common error reasons first."""
    return Summary(
        attempts=tally.attempts,
        assessed=tally.assessed,
        passed=tally.passed,
        platform_errors=tally.platform_errors,
        task_errors=tally.task_errors,
        mean_reward=tally.reward_sum / tally.assessed if tally.assessed else None,
        error_reasons=dict(Counter(tally.error_reasons).most_common(REASONS_SHOWN)),
    )


def summarize(assessments: list[Assessment]) -> Summary:
    return summary_of(tally_assessments(assessments))


def summarize_unscored(outcomes: list[TrialOutcome]) -> Summary:
    """Actor-only execution: nothing is assessed; errors are counted as for evaluations."""
    return summary_of(tally_outcomes(outcomes))


@dataclass
class TaskResult:
    task_name: str
    attempts: int = 0
    rewards: list[float | None] = field(default_factory=list)
    trial_keys: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    @property
    def pass_rate(self) -> float | None:
        scored = [r for r in self.rewards if r is not None]
        return sum(passed(r) for r in scored) / len(scored) if scored else None

    def as_dict(self) -> dict[str, object]:
        return {
            "task": self.task_name,
            "attempts": self.attempts,
            "rewards": self.rewards,
            "pass_rate": self.pass_rate,
            "trial_records": self.trial_keys,
            "failures": self.failures,
        }


@dataclass(frozen=True)
class RunResults:
    tasks: list[TaskResult]
    summary: Summary
    batches_done: int


def _batches(engine: Engine, store: ObjectStore, run: RunRecord) -> Iterator[BatchResults]:
    """The run's tallied batches in order, up to the first one without trials. A batch
    stored before tallies were kept is tallied now, once."""
    tallied = read_batch_results(engine, run.run_id)
    for index in range(run.batch_count):
        batch = tallied.get(index) or tally_batch(
            engine, store, batch_key(run.run_id, index), replace=False
        )
        if batch is None:
            return
        yield batch


def collect_results(engine: Engine, store: ObjectStore, run: RunRecord) -> RunResults:
    by_task: dict[str, TaskResult] = {}
    outcomes, assessments = Tally(), Tally()
    batches = 0
    for batch in _batches(engine, store, run):
        batches += 1
        outcomes += batch.outcomes
        assessments += batch.assessments
        for task in batch.tasks:
            result = by_task.setdefault(task.task_name, TaskResult(task.task_name))
            result.attempts += task.attempts
            result.rewards.extend(task.rewards)
            result.trial_keys.extend(task.trial_keys)
            result.failures.extend(task.failures)
    summary = summary_of(assessments if assessments.attempts else outcomes)
    return RunResults(list(by_task.values()), summary, batches)
