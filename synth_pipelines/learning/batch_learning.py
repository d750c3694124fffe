"""One sampling group's learning inputs: its evidence read once, its standings settled, its
datums packed from those standings.

Qualification feeds packing as data: the standings are the only input of the datums, so
the tables always equal what was trained on. A group's evidence is read (and its
checksums verified) exactly once, when the group is learned from.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import Engine
from tinker_cookbook.rl.types import TrajectoryGroup

from synth_pipelines.contracts.assessment import Assessment
from synth_pipelines.contracts.interaction import Interaction
from synth_pipelines.contracts.learning import DatumRow, QualifiedAttempt
from synth_pipelines.contracts.plan import TrainPlan
from synth_pipelines.contracts.trial import TrialOutcome
from synth_pipelines.evidence.reader import read_attempt_evidence
from synth_pipelines.learning.datums import group_datums
from synth_pipelines.learning.packing_stats import AttemptPacking, group_packing
from synth_pipelines.learning.qualification import actor_calls, qualify_group
from synth_pipelines.learning.trajectories import MAIN_AGENT, agent_calls, trajectory
from synth_pipelines.storage.objectstore import ObjectStore


@dataclass(frozen=True)
class EvidenceAudit:
    """What reading a group's evidence found: the check behind `evidence_integrity`."""

    chunks: int = 0
    bytes: int = 0
    calls: int = 0
    problems: dict[str, str] = field(default_factory=dict)
    misaligned: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        return not self.problems and not self.misaligned

    def __add__(self, other: EvidenceAudit) -> EvidenceAudit:
        return EvidenceAudit(
            self.chunks + other.chunks,
            self.bytes + other.bytes,
            self.calls + other.calls,
            {**self.problems, **other.problems},
            self.misaligned + other.misaligned,
        )


@dataclass(frozen=True)
class GroupLearning:
    group_index: int
    standings: list[QualifiedAttempt]
    datums: list[DatumRow]
    packing: list[AttemptPacking]
    """How each packed attempt split into those datums, and why."""
    rollouts: TrajectoryGroup | None
    """The assessed attempts' main-agent trajectories with their rewards, for the batch's
    trajectory metrics (tinker-cookbook's); None when no attempt of the group qualified."""
    audit: EvidenceAudit


def _rollouts(
    standings: list[QualifiedAttempt], calls: dict[str, list[Interaction]]
) -> TrajectoryGroup | None:
    qualified = [s for s in standings if s.qualified and s.reward is not None]
    if not qualified:
        return None
    trajectories = []
    for standing in qualified:
        mine = agent_calls(actor_calls(calls[standing.attempt_id], standing.trial_id))
        main = mine.get(MAIN_AGENT) or next(iter(mine.values()))
        trajectories.append(trajectory(main))
    return TrajectoryGroup(
        trajectories_G=trajectories,
        final_rewards_G=[float(s.reward) for s in qualified if s.reward is not None],
        metrics_G=[{} for _ in qualified],
    )


def learn_group(
    engine: Engine,
    store: ObjectStore,
    plan: TrainPlan,
    sampler: str,
    outcomes: list[TrialOutcome],
    assessments: list[Assessment],
) -> GroupLearning:
    """Qualify one sampling group and pack its datums (blocking I/O: run it in a thread)."""
    group = sorted(outcomes, key=lambda o: o.attempt_index)
    evidence = read_attempt_evidence(engine, store, [o.attempt_id for o in group])
    by_attempt = {a.attempt_id: a for a in assessments}
    standings = qualify_group(
        group, by_attempt, evidence.calls, evidence.problems, plan.eligibility, sampler
    )
    audit = EvidenceAudit(
        chunks=evidence.chunks,
        bytes=evidence.bytes,
        calls=sum(len(calls) for calls in evidence.calls.values()),
        problems=dict(evidence.problems),
        misaligned=tuple(
            call.call_id for calls in evidence.calls.values() for call in calls if not call.aligned
        ),
    )
    return GroupLearning(
        group_index=group[0].group_index,
        standings=standings,
        datums=group_datums(standings, evidence.calls),
        packing=group_packing(standings, evidence.calls),
        rollouts=_rollouts(standings, evidence.calls),
        audit=audit,
    )
