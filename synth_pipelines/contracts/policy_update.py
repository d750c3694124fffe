"""A batch's policy update: marked unresolved before its optimizer step is enqueued, then
acknowledged with the trainer state saved after it, or resolved by an operator."""

from __future__ import annotations

from typing import Annotated, Self

from pydantic import AliasChoices, BaseModel, ConfigDict, Field

from synth_pipelines.contracts.batch_learning import BatchLearning
from synth_pipelines.contracts.stored import JsonText, UtcDateTime


class PolicyUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, from_attributes=True)

    run_id: str
    batch: str
    batch_index: int
    status: str
    datums: int
    state_path: str | None
    metrics: Annotated[BatchLearning, JsonText] = Field(
        validation_alias=AliasChoices("metrics", "metrics_json")
    )
    """The batch's learning numbers; none while the update is unresolved."""
    marked_at: UtcDateTime
    resolution: str | None


class BatchLearningRow(BatchLearning):
    """One batch's learning numbers with the update they belong to, flat: a row of
    `synth run show`'s learning tables and of its `--json` document."""

    batch: str
    batch_index: int
    status: str

    @classmethod
    def of(cls, update: PolicyUpdate) -> Self:
        learning = update.metrics
        return cls.model_validate(
            {
                **learning.model_dump(),
                "batch": update.batch,
                "batch_index": update.batch_index,
                "status": update.status,
                "datums": update.datums,
                "no_step_reason": None
                if learning.optimizer_step
                else learning.no_step_reason or update.resolution,
            }
        )
