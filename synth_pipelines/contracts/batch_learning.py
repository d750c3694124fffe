"""A training batch's learning numbers: what sampling gave learning and what the optimizer
step did. The training step produces them, the policy update stores them (`metrics_json`),
and the batch's Dagster metadata, `synth run show` and `synth run metrics` read them."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from synth_pipelines.contracts.new_datum_reasons import NewDatumReason


class BatchLearning(BaseModel):
    """A batch records the numbers it has (`recorded`): one that applied no step records no
    step numbers, and one recorded before a number was counted lacks it. A number a batch
    did not record reads as its default here. What each number is: `BatchLearningRow`."""

    model_config = ConfigDict(frozen=True)

    sampler: str = ""
    attempts: int = 0
    assessed: int = 0
    reward_mean: float = 0.0
    reward_std: float = 0.0
    groups: int = 0
    groups_used: int = 0
    groups_dropped: dict[str, int] = {}
    """Groups that could not teach, by `ExclusionReason` (batches recorded before reasons
    were typed may name others)."""
    attempts_excluded: dict[str, int] = {}
    """Attempts that could not teach, by `ExclusionReason`, as `groups_dropped`."""
    frac_mixed: float = 0.0
    frac_all_good: float = 0.0
    frac_all_bad: float = 0.0
    datums: int = 0
    action_tokens_per_turn: float = 0.0
    observation_tokens_per_turn: float = 0.0
    turns_per_attempt: float = 0.0
    calls_per_attempt_mean: float | None = None
    calls_per_attempt_max: int | None = None
    datums_per_attempt_mean: float | None = None
    datums_per_attempt_max: int | None = None
    new_datum_reasons: dict[NewDatumReason, int] | None = None
    sampling_sec: float | None = None
    optimizer_step: bool = False
    no_step_reason: str | None = None
    learning_rate: float | None = None
    loss: float | None = None
    grad_norm: float | None = None
    entropy: float | None = None
    kl_sample_train_v1: float | None = None
    kl_sample_train_v2: float | None = None
    action_tokens: int | None = None
    forward_backward_sec: float | None = None
    optim_step_sec: float | None = None
    step_sec: float | None = None
    """The whole update, as the batch's process timed it; measured after the update is
    stored, so it is reported (events, Dagster) but never read back."""

    def recorded(self) -> dict[str, Any]:
        """The numbers the batch recorded, by name: what is stored and reported."""
        return self.model_dump(exclude_unset=True)
