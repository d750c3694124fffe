"""Several judges (or one judge repeated) over the same retained work: how they agree."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from itertools import combinations

from sqlalchemy import Engine

from synth_pipelines.contracts.assessment import Assessment, passed
from synth_pipelines.contracts.run_record import RunRecord
from synth_pipelines.contracts.run_spec import batch_key
from synth_pipelines.contracts.table import parquet_to_table
from synth_pipelines.control.table_outputs import table_history
from synth_pipelines.storage.objectstore import ObjectStore


@dataclass
class AssessmentSet:
    label: str
    assessor: str
    assessor_digest: str
    verdicts: dict[str, Assessment] = field(default_factory=dict)

    def pass_rate(self) -> float | None:
        scored = [a for a in self.verdicts.values() if a.valid]
        return sum(passed(a.reward) for a in scored) / len(scored) if scored else None


@dataclass(frozen=True)
class Agreement:
    first: str
    second: str
    compared: int
    agreeing: int
    differing_tasks: tuple[str, ...]

    @property
    def rate(self) -> float | None:
        return self.agreeing / self.compared if self.compared else None


def _label(row: Assessment) -> str:
    suffix = row.assessment_id.removeprefix(f"{row.attempt_id}.")
    return f"{row.assessor} ({'in trial' if suffix == 'trial' else suffix})"


def assessment_sets(engine: Engine, store: ObjectStore, run: RunRecord) -> list[AssessmentSet]:
    sets: dict[str, AssessmentSet] = {}
    for index in range(run.batch_count):
        for ref in table_history(engine, "assessments", batch_key(run.run_id, index)):
            table = parquet_to_table(store.get(ref.key, expected_sha256=ref.sha256))
            for row in Assessment.from_table(table):
                label = _label(row)
                group = sets.setdefault(
                    label, AssessmentSet(label, row.assessor, row.assessor_digest)
                )
                group.verdicts[row.attempt_id] = row
    return list(sets.values())


def agreements(sets: list[AssessmentSet]) -> list[Agreement]:
    found = []
    for first, second in combinations(sets, 2):
        common = sorted(set(first.verdicts) & set(second.verdicts))
        same, differing = 0, set()
        for attempt in common:
            a, b = first.verdicts[attempt], second.verdicts[attempt]
            if a.valid and b.valid and passed(a.reward) == passed(b.reward):
                same += 1
            else:
                differing.add(a.task_name)
        found.append(
            Agreement(first.label, second.label, len(common), same, tuple(sorted(differing)))
        )
    return found


def verdicts_by_task(sets: list[AssessmentSet]) -> dict[str, dict[str, list[float | None]]]:
    """task -> assessor label -> rewards, for the per-task table."""
    table: dict[str, dict[str, list[float | None]]] = defaultdict(dict)
    for group in sets:
        for verdict in sorted(group.verdicts.values(), key=lambda a: a.attempt_id):
            table[verdict.task_name].setdefault(group.label, []).append(verdict.reward)
    return dict(table)
