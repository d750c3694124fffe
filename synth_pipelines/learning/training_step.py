"""One training batch's learning, in one place, the way tinker-cookbook's train step reads.

`submit_group` takes a sampling group the moment its attempts are assessed: its evidence
is read once, its attempts qualified, its datums packed from those standings, and its
forward_backward sent, while other groups of the batch still sample. `finish` waits for
every group, then applies the batch's one optimizer step behind the unresolved mark
(`learning/update.py`) and saves the sampler that binds the next batch. Nothing of it
lives beyond the batch's own process: the tables it returns are what was trained on.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import Counter
from dataclasses import asdict, dataclass, field

from sqlalchemy import Engine
from tinker_cookbook.rl.metric_util import compute_trajectory_metrics

from synth_pipelines.contracts.batch_learning import BatchLearning
from synth_pipelines.contracts.checkpoint import Checkpoint
from synth_pipelines.contracts.learning import DatumRow, PolicyBinding, QualifiedAttempt
from synth_pipelines.contracts.plan import TrainPlan
from synth_pipelines.contracts.run_spec import RunSpec
from synth_pipelines.contracts.trial import TrialOutcome
from synth_pipelines.control.worker_claim import WorkerClaim
from synth_pipelines.judging.assessing import Assessor, trial_assessment
from synth_pipelines.learning.batch_learning import EvidenceAudit, GroupLearning, learn_group
from synth_pipelines.learning.packing_stats import batch_packing
from synth_pipelines.learning.trainer import Trainer
from synth_pipelines.learning.update import apply_update, commit_checkpoint
from synth_pipelines.storage.objectstore import ObjectStore


def signal_metrics(groups: list[GroupLearning]) -> BatchLearning:
    """What the batch's sampling gave learning: rewards, group shares, tokens, drops, and
    how its attempts packed into datums."""
    standings = [s for group in groups for s in group.standings]
    rewards = [s.reward for s in standings if s.qualified and s.reward is not None]
    mean = sum(rewards) / len(rewards) if rewards else 0.0
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / len(rewards)) if rewards else 0.0
    rollouts = [group.rollouts for group in groups if group.rollouts is not None]
    cookbook = compute_trajectory_metrics(rollouts, [[] for _ in rollouts]) if rollouts else {}
    used = [any(s.group_qualified for s in group.standings) for group in groups]
    dropped = Counter(
        str(group.standings[0].group_exclusion_reason)
        for group, kept in zip(groups, used, strict=True)
        if not kept and group.standings
    )
    excluded = Counter(str(s.exclusion_reason) for s in standings if not s.qualified)
    return BatchLearning(
        attempts=len(standings),
        assessed=len(rewards),
        reward_mean=mean,
        reward_std=std,
        groups=len(groups),
        groups_used=sum(used),
        groups_dropped=dict(dropped),
        attempts_excluded=dict(excluded),
        frac_mixed=cookbook.get("env/all/by_group/frac_mixed", 0.0),
        frac_all_good=cookbook.get("env/all/by_group/frac_all_good", 0.0),
        frac_all_bad=cookbook.get("env/all/by_group/frac_all_bad", 0.0),
        action_tokens_per_turn=cookbook.get("env/all/ac_tokens_per_turn", 0.0),
        observation_tokens_per_turn=cookbook.get("env/all/ob_tokens_per_turn", 0.0),
        turns_per_attempt=cookbook.get("env/all/turns_per_episode", 0.0),
        datums=sum(len(group.datums) for group in groups),
        **asdict(batch_packing([attempt for group in groups for attempt in group.packing])),
    )


@dataclass
class TrainingStep:
    engine: Engine
    claim: WorkerClaim
    store: ObjectStore
    spec: RunSpec
    index: int
    binding: PolicyBinding
    trainer: Trainer
    submits: bool = True
    """Send each group's datums to forward_backward (only when the batch's update is made)."""
    groups: list[GroupLearning] = field(default_factory=list)

    @property
    def plan(self) -> TrainPlan:
        assert isinstance(self.spec.plan, TrainPlan)
        return self.spec.plan

    async def submit_group(self, outcomes: list[TrialOutcome]) -> GroupLearning:
        assessor = Assessor.of(self.spec.judge)
        group = await asyncio.to_thread(
            learn_group,
            self.engine,
            self.store,
            self.plan,
            self.binding.sampler,
            outcomes,
            [trial_assessment(outcome, assessor) for outcome in outcomes],
        )
        self.groups.append(group)
        if self.submits:
            await self.trainer.submit(group.datums)
        return group

    def _ordered(self) -> list[GroupLearning]:
        return sorted(self.groups, key=lambda group: group.group_index)

    @property
    def standings(self) -> list[QualifiedAttempt]:
        return [s for group in self._ordered() for s in group.standings]

    @property
    def datums(self) -> list[DatumRow]:
        return [row for group in self._ordered() for row in group.datums]

    @property
    def audit(self) -> EvidenceAudit:
        return sum((group.audit for group in self.groups), EvidenceAudit())

    async def update(self, sampling_sec: float) -> BatchLearning:
        """The one optimizer step of the batch (or the reason there is none); returns the
        batch's learning numbers, as `synth run show` and the Dagster UI show them."""
        signal = signal_metrics(self._ordered()).model_copy(
            update={"sampler": self.binding.sampler, "sampling_sec": sampling_sec}
        )
        started = time.monotonic()
        learning = await apply_update(
            self.engine, self.spec, self.index, self.trainer, self.datums, signal
        )
        return learning.model_copy(update={"step_sec": time.monotonic() - started})

    async def checkpoint(self, learning: BatchLearning) -> Checkpoint:
        """The sampler weights and trainer state that bind the next batch."""
        return await commit_checkpoint(
            self.engine, self.claim, self.spec, self.index, self.trainer, self.binding, learning
        )
