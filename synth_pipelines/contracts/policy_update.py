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
    """The batch's learning numbers (none recorded while the update is unresolved)."""
    marked_at: UtcDateTime
    resolution: str | None


class BatchLearningRow(BatchLearning):
    """One training batch, flat: its update and its learning numbers, a row of `synth run
    show`'s learning tables and of its `--json` document.

    The group shares and per-turn token counts are tinker-cookbook's `by_group/frac_*`,
    `ac_tokens_per_turn`, `ob_tokens_per_turn` and `turns_per_episode`; the sampler/trainer
    agreement is its `kl_sample_train_v1`/`_v2`, measured at the batch's first
    forward_backward. Step fields are null for a batch that applied no step.

    The per-attempt calls and datums are over the attempts packed into datums;
    `new_datum_reasons` counts why each datum after an attempt's first one started. All
    are null for batches recorded before they were counted, and the means and maxima
    also for a batch that packed no attempt."""

    batch: str
    batch_index: int
    status: str

    @classmethod
    def of(cls, update: PolicyUpdate) -> Self:
        """The update's row: its datums are the update's; a batch that applied no step
        says why, in its own words or else in the update's resolution (discarded)."""
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
