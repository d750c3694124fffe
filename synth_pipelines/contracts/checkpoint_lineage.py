"""A checkpoint's lineage both ways: the policy update that produced it, the sampling groups
recorded against it since, and every run that chose it."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from synth_pipelines.contracts.checkpoint import Checkpoint
from synth_pipelines.contracts.policy_update import PolicyUpdate


class SamplingGroup(BaseModel):
    """One task's attempts in a batch that sampled through the checkpoint."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    run_id: str
    batch: str
    group_index: int
    task_name: str
    attempts: int
    mean_reward: float | None
    qualified: bool | None
    """None where the batch has no qualification (evaluation, unscored execution)."""
    exclusion: str | None


class CheckpointSelection(BaseModel):
    """A run that chose the checkpoint: as its `--model`, or as a batch's policy."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    run_id: str
    kind: str
    status: str
    as_model: bool
    policy_batches: tuple[str, ...]


class CheckpointLineage(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    checkpoint: Checkpoint
    update: PolicyUpdate | None
    groups: tuple[SamplingGroup, ...]
    selected_by: tuple[CheckpointSelection, ...]
