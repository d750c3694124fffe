"""All attempts of a batch: groups run concurrently within resource admission (the
run's own budget, then its worker pool's)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

from harbor.models.task.task import Task
from sqlalchemy import Engine

from synth_pipelines.config import Settings
from synth_pipelines.contracts.admission_lease import ResourceDemand
from synth_pipelines.contracts.plan import ExecutionSettings, WarmStartPlan
from synth_pipelines.contracts.run_spec import RunSpec
from synth_pipelines.contracts.trial import TrialOutcome
from synth_pipelines.control.worker_claim import WorkerClaim
from synth_pipelines.registry.task_packages import materialize_task
from synth_pipelines.runtime.admission import PoolAdmission, ResourceAdmission, WorkerPool
from synth_pipelines.runtime.batch_plan import BatchPlan
from synth_pipelines.runtime.failures import AttemptFailedError
from synth_pipelines.runtime.harbor_trials import Actor, AttemptContext, run_attempt
from synth_pipelines.storage.objectstore import ObjectStore

DEFAULT_DEMAND = ResourceDemand(cpus=1.0, memory_mb=1024, storage_mb=1024)


def demand_for(task_dir: Path, settings: ExecutionSettings) -> ResourceDemand:
    """What one attempt holds: the plan's overrides, else the task's own declaration."""
    declared = Task(task_dir).config.environment
    overrides = settings.overrides
    return ResourceDemand(
        cpus=float(overrides.cpus or declared.cpus or DEFAULT_DEMAND.cpus),
        memory_mb=int(overrides.memory_mb or declared.memory_mb or DEFAULT_DEMAND.memory_mb),
        storage_mb=int(overrides.storage_mb or declared.storage_mb or DEFAULT_DEMAND.storage_mb),
    )


def retries_after(outcome: TrialOutcome) -> bool:
    """Whether the attempt is run again: the platform failed it (its model route, its
    sandbox, a platform call; never an assessed attempt or a task error), and not because
    its batch was being stopped."""
    return outcome.error_class == "platform" and outcome.exception_type != "CancelledError"


def execution_settings(spec: RunSpec) -> ExecutionSettings:
    """How the run's attempts are sampled and run. A warm start samples none: its run has
    no trials, so no batch of it gets here."""
    assert not isinstance(spec.plan, WarmStartPlan), f"run {spec.run_id} is a warm start"
    return spec.plan


async def run_batch_trials(
    spec: RunSpec,
    plan: BatchPlan,
    store: ObjectStore,
    engine: Engine,
    deployment: Settings,
    claim: WorkerClaim,
    *,
    model: str | None,
    verify: bool,
    on_outcome: Callable[[TrialOutcome], None] = lambda outcome: None,
    on_group: Callable[[list[TrialOutcome]], Awaitable[None]] | None = None,
) -> list[TrialOutcome]:
    """Run every attempt on this deployment's host, in its scratch space and within its
    worker pool, recording each as progress of `claim`; `on_group` gets each group's
    outcomes as soon as all are in, while other groups may still be running. Stopped
    (cancelled), it stops the groups' learning it started too."""
    actor = Actor.of(spec.actor, model)
    settings = execution_settings(spec)
    work_dir = deployment.work_dir
    admission = ResourceAdmission(settings.budget)
    pool_admission = PoolAdmission(engine, WorkerPool.configured(deployment))
    trials_dir = work_dir / "trials" / plan.batch
    task_dirs = {
        group.index: await asyncio.to_thread(
            materialize_task, store, group.task, work_dir / "tasks"
        )
        for group in plan.groups
    }
    demands = {index: demand_for(task_dir, settings) for index, task_dir in task_dirs.items()}
    finished: dict[int, list[TrialOutcome]] = {group.index: [] for group in plan.groups}
    group_work: list[asyncio.Task[None]] = []

    async def run_once(
        group_index: int, attempt_index: int, attempt_id: str, retried_as: str | None
    ) -> TrialOutcome:
        group = plan.groups[group_index]
        context = AttemptContext(
            run_id=spec.run_id,
            batch=plan.batch,
            attempt_id=attempt_id,
            group_index=group_index,
            attempt_index=attempt_index,
            task=group.task,
            task_dir=task_dirs[group_index],
            owner=spec.owner,
        )
        demand, what = demands[group_index], f"task {group.task.name}"
        async with (
            admission.admit(demand, what),
            pool_admission.admit(demand, what, run_id=spec.run_id, attempt_id=attempt_id),
        ):
            try:
                outcome = await run_attempt(
                    context,
                    actor,
                    settings,
                    store,
                    trials_dir,
                    deployment,
                    verify=verify,
                    judge=spec.judge,
                )
            except Exception as error:
                raise AttemptFailedError(attempt_id, group.task.name, error) from error
        retried = retried_as if retries_after(outcome) else None
        await asyncio.to_thread(
            claim.append,
            "attempt.finished",
            {
                "batch": plan.batch,
                "attempt_id": attempt_id,
                "task": group.task.name,
                "status": outcome.status,
                "rewards": outcome.rewards_json,
                "exception": outcome.exception_type,
                "error_class": outcome.error_class,
                "error_reason": outcome.error_reason,
                **({"retried_as": retried} if retried else {}),
            },
        )
        return outcome

    async def attempt(group_index: int, attempt_index: int, attempt_id: str) -> TrialOutcome:
        group = plan.groups[group_index]
        tried = attempt_id
        for retry in range(1, settings.platform_retries + 2):
            retried_as = f"{attempt_id}.r{retry}" if retry <= settings.platform_retries else None
            outcome = await run_once(group_index, attempt_index, tried, retried_as)
            if retried_as is None or not retries_after(outcome):
                break
            await asyncio.sleep(deployment.platform_retry_delay_sec * retry)
            tried = retried_as
        on_outcome(outcome)
        finished[group_index].append(outcome)
        if on_group is not None and len(finished[group_index]) == len(group.attempt_ids):
            group_work.append(asyncio.ensure_future(on_group(finished[group_index])))
        return outcome

    try:
        outcomes = await asyncio.gather(
            *(
                attempt(group.index, a, attempt_id)
                for group in plan.groups
                for a, attempt_id in enumerate(group.attempt_ids)
            )
        )
        await asyncio.gather(*group_work)
    finally:
        for work in group_work:
            work.cancel()
    return list(outcomes)
