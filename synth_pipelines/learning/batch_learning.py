"""A batch's learning joins: assessments and published evidence in, qualified attempts
and datums out. The same functions serve a group the moment it is ready and the whole
batch afterwards, so the tables always equal what was trained on."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from sqlalchemy import Engine

from synth_pipelines.contracts.assessment import Assessment
from synth_pipelines.contracts.learning import DatumRow, QualifiedAttempt
from synth_pipelines.contracts.plan import TrainPlan
from synth_pipelines.contracts.trial import TrialOutcome
from synth_pipelines.evidence.reader import read_attempt_evidence
from synth_pipelines.learning.datums import group_datums
from synth_pipelines.learning.qualification import qualify_group
from synth_pipelines.storage.objectstore import ObjectStore


@dataclass(frozen=True)
class LearningInputs:
    standings: list[QualifiedAttempt]
    datums: list[DatumRow]
    evidence_chunks: int
    evidence_bytes: int


def learn_from(
    engine: Engine,
    store: ObjectStore,
    plan: TrainPlan,
    sampler: str,
    outcomes: list[TrialOutcome],
    assessments: list[Assessment],
) -> LearningInputs:
    evidence = read_attempt_evidence(engine, store, [o.attempt_id for o in outcomes])
    by_attempt = {a.attempt_id: a for a in assessments}
    groups: dict[int, list[TrialOutcome]] = defaultdict(list)
    for outcome in outcomes:
        groups[outcome.group_index].append(outcome)
    standings: list[QualifiedAttempt] = []
    datums: list[DatumRow] = []
    for index in sorted(groups):
        group = sorted(groups[index], key=lambda o: o.attempt_index)
        standing = qualify_group(
            group, by_attempt, evidence.calls, evidence.problems, plan.eligibility, sampler
        )
        standings.extend(standing)
        datums.extend(group_datums(standing, evidence.calls))
    return LearningInputs(standings, datums, evidence.chunks, evidence.bytes)
