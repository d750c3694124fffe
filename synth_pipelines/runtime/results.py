"""What a run produced: per-task attempts and rewards, pass rate, where the work is."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from sqlalchemy import Engine

from synth_pipelines.contracts.assessment import Assessment, passed
from synth_pipelines.contracts.run_spec import batch_key
from synth_pipelines.contracts.trial import TrialOutcome
from synth_pipelines.control.runs import RunRecord
from synth_pipelines.control.table_outputs import TableMissingError, load_table
from synth_pipelines.storage.objectstore import ObjectStore


@dataclass(frozen=True)
class Summary:
    attempts: int
    assessed: int
    passed: int
    invalid: int
    mean_reward: float | None

    @property
    def pass_rate(self) -> float | None:
        return self.passed / self.assessed if self.assessed else None

    def as_dict(self) -> dict[str, float | int | None]:
        return {
            "attempts": self.attempts,
            "assessed": self.assessed,
            "passed": self.passed,
            "invalid": self.invalid,
            "pass_rate": self.pass_rate,
            "mean_reward": self.mean_reward,
        }


def summarize(assessments: list[Assessment]) -> Summary:
    rewards = [a.reward for a in assessments if a.valid and a.reward is not None]
    return Summary(
        attempts=len(assessments),
        assessed=len(rewards),
        passed=sum(passed(r) for r in rewards),
        invalid=len(assessments) - len(rewards),
        mean_reward=sum(rewards) / len(rewards) if rewards else None,
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
    batches = 0
    for outcomes, judged in _batch_tables(engine, store, run):
        batches += 1
        reward_of = {a.attempt_id: a.reward for a in judged}
        for outcome in outcomes:
            result = by_task.setdefault(outcome.task_name, TaskResult(outcome.task_name))
            result.attempts += 1
            result.rewards.append(reward_of.get(outcome.attempt_id))
            result.trial_keys.append(outcome.trial_key)
            if outcome.exception_type:
                result.failures.append(f"{outcome.attempt_id}: {outcome.exception_type}")
        all_assessments.extend(judged)
    summary = summarize(all_assessments)
    if not all_assessments:
        summary = Summary(sum(t.attempts for t in by_task.values()), 0, 0, 0, None)
    return RunResults(list(by_task.values()), summary, batches)
