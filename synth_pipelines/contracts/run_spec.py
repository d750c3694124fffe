"""The accepted, pinned specification of an experiment."""

from __future__ import annotations

import hashlib
import math
from datetime import datetime

import rfc8785
from pydantic import BaseModel, ConfigDict

from synth_pipelines.contracts.plan import Plan, TrainPlan, WarmStartPlan
from synth_pipelines.contracts.profile import PinnedProfile


class DatasetPin(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    version: str
    digest: str
    task_count: int

    @property
    def ref(self) -> str:
        return f"{self.name}@{self.version}"


class RunRequest(BaseModel):
    """What an operator submits; its digest decides whether a retry is the same request."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    owner: str
    dataset: DatasetPin
    actor: PinnedProfile
    judge: PinnedProfile | None = None
    plan: Plan
    model: str | None = None

    @property
    def actor_model(self) -> str | None:
        """The model the actor is bound to: the run's `--model`, else its profile's."""
        return self.model or self.actor.profile().model

    def digest(self) -> str:
        request = self.model_dump(mode="json", include=set(RunRequest.model_fields))
        return "sha256:" + hashlib.sha256(rfc8785.dumps(request)).hexdigest()


class RunSpec(RunRequest):
    run_id: str
    accepted_at: datetime

    @property
    def kind(self) -> str:
        return self.plan.kind

    @property
    def task_limit(self) -> int:
        limit = self.plan.max_tasks
        return self.dataset.task_count if limit is None else min(limit, self.dataset.task_count)

    @property
    def tasks_per_batch(self) -> int:
        if isinstance(self.plan, TrainPlan):
            return self.plan.groups_per_batch
        if isinstance(self.plan, WarmStartPlan):
            return self.task_limit
        return self.plan.tasks_per_batch

    @property
    def attempts_per_task(self) -> int:
        """Sampled attempts per task; a warm start samples none."""
        if isinstance(self.plan, TrainPlan):
            return self.plan.attempts_per_group
        if isinstance(self.plan, WarmStartPlan):
            return 0
        return self.plan.attempts_per_task

    @property
    def batch_count(self) -> int:
        if isinstance(self.plan, TrainPlan):
            return self.plan.batch_count(self.task_limit)
        if isinstance(self.plan, WarmStartPlan):
            return 1
        return math.ceil(self.task_limit / self.plan.tasks_per_batch)


def batch_key(run_id: str, index: int) -> str:
    return f"{run_id}.b{index:04d}"


def parse_batch_key(key: str) -> tuple[str, int]:
    run_id, sep, batch = key.rpartition(".b")
    if not sep or not batch.isdigit():
        raise ValueError(f"{key!r} is not a batch partition key '<run>.b<NNNN>'")
    return run_id, int(batch)
