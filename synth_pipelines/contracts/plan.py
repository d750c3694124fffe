"""Plans: how an experiment runs. Unknown fields are refused, so a typo never silently
falls back to a default."""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from synth_pipelines.contracts.sampling_limits import SamplingLimits

HARBOR_PROVIDERS = ("docker", "daytona", "modal", "e2b", "runloop", "podman")


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ResourceBudget(StrictModel):
    """What one run may hold at once; attempts are admitted against all four."""

    max_active_attempts: int = Field(default=4, ge=1)
    cpus: float = Field(default=2.0, gt=0)
    memory_mb: int = Field(default=8192, ge=64)
    storage_mb: int = Field(default=20480, ge=64)


class EnvironmentChoice(StrictModel):
    """Where attempts run: the local sandbox, or one of Harbor's own providers."""

    provider: str = "local"
    kwargs: dict[str, str | int | float | bool] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _known(self) -> EnvironmentChoice:
        if (
            self.provider != "local"
            and self.provider not in HARBOR_PROVIDERS
            and ":" not in self.provider
        ):
            raise ValueError(
                f"environment provider {self.provider!r} is unknown: use 'local', one of "
                f"{', '.join(HARBOR_PROVIDERS)}, or an import path 'package.module:Class'"
            )
        return self


class ResourceOverrides(StrictModel):
    """Sandbox shape applied to every task of the run, in place of task.toml's own."""

    cpus: float | None = Field(default=None, gt=0)
    memory_mb: int | None = Field(default=None, ge=16)
    storage_mb: int | None = Field(default=None, ge=16)


class Timeouts(StrictModel):
    agent_sec: float | None = Field(default=None, gt=0)
    verifier_sec: float | None = Field(default=None, gt=0)


class ExecutionSettings(StrictModel):
    max_tasks: int | None = Field(default=None, ge=1)
    seed: int = Field(
        default=0,
        description="seeds sampling: each model call samples with a seed derived from this, "
        "the attempt's place in the run and the call's index, so a run can be repeated",
    )
    budget: ResourceBudget = Field(default_factory=ResourceBudget)
    environment: EnvironmentChoice = Field(default_factory=EnvironmentChoice)
    overrides: ResourceOverrides = Field(default_factory=ResourceOverrides)
    timeouts: Timeouts = Field(default_factory=Timeouts)
    platform_retries: int = Field(
        default=1,
        ge=0,
        le=3,
        description="how often an attempt the platform failed (its model route, its sandbox, "
        "a platform call; never an assessed attempt or a task error) is run again, as a new "
        "attempt `<attempt>.r1`, `.r2`; the last try's outcome is the attempt's",
    )
    temperature: float | None = Field(
        default=None,
        ge=0,
        le=2,
        description="the actor's sampling temperature: every model call of the actor samples "
        "at it, whatever its harness asks (None: as the harness asks)",
    )
    sampling_limits: SamplingLimits = Field(
        default_factory=SamplingLimits,
        description="what each attempt's actor may sample through the capture proxy at once "
        "and per second; beyond it the proxy answers 429 with retry-after, so no attempt "
        "slows the others' calls",
    )


class EvalPlan(ExecutionSettings):
    """Repeat a fixed setup over a dataset and assess every attempt."""

    kind: Literal["eval"]
    attempts_per_task: int = Field(default=1, ge=1, le=1000)
    tasks_per_batch: int = Field(default=64, ge=1, le=10_000)


class ExecutePlan(ExecutionSettings):
    """Actor-only execution: the work and its artifacts, no score."""

    kind: Literal["execute"]
    attempts_per_task: int = Field(default=1, ge=1, le=1000)
    tasks_per_batch: int = Field(default=64, ge=1, le=10_000)


class Eligibility(StrictModel):
    drop_constant_reward_groups: bool = True
    min_qualified_attempts: int = Field(default=2, ge=1)


class TrainPlan(ExecutionSettings):
    """Sampling groups per batch, a policy update per batch, a checkpoint per batch."""

    kind: Literal["train"]
    groups_per_batch: int = Field(default=4, ge=1)
    attempts_per_group: int = Field(default=4, ge=2)
    batches: int | None = Field(default=None, ge=1)
    epochs: int | None = Field(default=None, ge=1)
    learning_rate: float = Field(default=1e-4, gt=0)
    lora_rank: int = Field(default=8, ge=1, le=256)
    loss: Literal["importance_sampling", "ppo"] = "importance_sampling"
    max_tokens: int = Field(default=512, ge=1)
    temperature: float | None = Field(
        default=1.0,
        ge=0,
        le=2,
        description="the actor's sampling temperature for training; evaluate at the same "
        "one to measure the policy that was trained",
    )
    eligibility: Eligibility = Field(default_factory=Eligibility)
    continue_optimizer: bool = Field(
        default=False,
        description="when the model binding is a checkpoint: continue its optimizer state "
        "(True) or start new training from its weights with a fresh optimizer (False)",
    )

    @model_validator(mode="after")
    def _length(self) -> TrainPlan:
        if (self.batches is None) == (self.epochs is None):
            raise ValueError("a train plan sets exactly one of 'batches' or 'epochs'")
        return self

    def batch_count(self, task_count: int) -> int:
        if self.batches is not None:
            return self.batches
        assert self.epochs is not None
        return math.ceil(self.epochs * task_count / self.groups_per_batch)


class WarmStartPlan(StrictModel):
    """Supervised training on worked examples before any sampling, with cross-entropy on
    the demonstrated completions, through the same tinker API as every other update. One
    checkpoint at the end; a train or eval run binds it.

    The examples are each task's `solution/demonstration.json`, rendered as the built-in
    agent would send it; or, for a native harness, the captured calls of `captured_run`."""

    kind: Literal["warm_start"]
    steps: int = Field(default=60, ge=1, le=100_000)
    demonstrations_per_step: int = Field(default=8, ge=1)
    learning_rate: float = Field(default=3e-3, gt=0)
    lora_rank: int = Field(default=16, ge=1, le=256)
    seed: int = 0
    max_tasks: int | None = Field(default=None, ge=1)
    captured_run: str | None = Field(
        default=None,
        description="a finished run of the same actor profile bound to a teacher "
        "(`synth model teach`): learn each of its captured calls, the prompt tokens the "
        "proxy rendered from what the harness sent and the teacher's completion tokens",
    )


Plan = Annotated[EvalPlan | ExecutePlan | TrainPlan | WarmStartPlan, Field(discriminator="kind")]
