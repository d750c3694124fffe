"""What a run produced: per-task attempts and rewards, pass rate, where the work is."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

from sqlalchemy import Engine

from synth_pipelines.contracts.assessment import Assessment, passed
from synth_pipelines.contracts.run_spec import batch_key
from synth_pipelines.contracts.trial import TrialOutcome
from synth_pipelines.control.runs import RunRecord
from synth_pipelines.control.table_outputs import TableMissingError, load_table
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

    def as_dict(self) -> dict:
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


def _top_reasons(errors: list[tuple[str, str | None]]) -> dict[str, int]:
    """`class: reason` -> count, the most common first; reasons are cut to their first line."""
    counts = Counter(f"{kind}: {(reason or '').splitlines()[0][:300]}" for kind, reason in errors)
    return dict(counts.most_common(REASONS_SHOWN))


def summarize(assessments: list[Assessment]) -> Summary:
    rewards = [a.reward for a in assessments if a.valid and a.reward is not None]
    errors = [(a.error_class or "task", a.reason) for a in assessments if not a.valid]
    return Summary(
        attempts=len(assessments),
        assessed=len(rewards),
        passed=sum(passed(r) for r in rewards),
        platform_errors=sum(kind == "platform" for kind, _ in errors),
        task_errors=sum(kind == "task" for kind, _ in errors),
        mean_reward=sum(rewards) / len(rewards) if rewards else None,
        error_reasons=_top_reasons(errors),
    )


def summarize_unscored(outcomes: list[TrialOutcome]) -> Summary:
    """Actor-only execution: nothing is assessed; errors are counted as for evaluations."""
    errors = [(o.error_class, o.error_reason) for o in outcomes if o.error_class is not None]
    return Summary(
        attempts=len(outcomes),
        assessed=0,
        passed=0,
        platform_errors=sum(kind == "platform" for kind, _ in errors),
        task_errors=sum(kind == "task" for kind, _ in errors),
        mean_reward=None,
        error_reasons=_top_reasons(errors),
    )


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

    def as_dict(self) -> dict:
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


def _batch_tables(
    engine: Engine, store: ObjectStore, run: RunRecord
) -> Iterator[tuple[list[TrialOutcome], list[Assessment]]]:
    for index in range(run.batch_count):
        key = batch_key(run.run_id, index)
        try:
            outcomes = TrialOutcome.from_table(load_table(engine, store, "trials", key))
        except TableMissingError:
            return
        try:
            judged = Assessment.from_table(load_table(engine, store, "assessments", key))
        except TableMissingError:
            judged = []
        yield outcomes, judged


def collect_results(engine: Engine, store: ObjectStore, run: RunRecord) -> RunResults:
    by_task: dict[str, TaskResult] = {}
    all_assessments: list[Assessment] = []
    all_outcomes: list[TrialOutcome] = []
    batches = 0
    for outcomes, judged in _batch_tables(engine, store, run):
        batches += 1
        all_outcomes.extend(outcomes)
        reward_of = {a.attempt_id: a.reward for a in judged}
        for outcome in outcomes:
            result = by_task.setdefault(outcome.task_name, TaskResult(outcome.task_name))
            result.attempts += 1
            result.rewards.append(reward_of.get(outcome.attempt_id))
            result.trial_keys.append(outcome.trial_key)
            if outcome.error_class:
                result.failures.append(
                    f"{outcome.attempt_id}: {outcome.error_class} error: {outcome.error_reason}"
                )
            elif outcome.exception_type:
                result.failures.append(f"{outcome.attempt_id}: {outcome.exception_type}")
        all_assessments.extend(judged)
    summary = summarize(all_assessments) if all_assessments else summarize_unscored(all_outcomes)
    return RunResults(list(by_task.values()), summary, batches)
