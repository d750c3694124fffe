"""Regrade: a judge (or the task's verifier again) assesses retained work; the actor
never runs again.

Tasks come from the run's original immutable task versions, the actor's outputs are
restored from the archived trial records, and Harbor's `RegradeTrial` runs the verifier
in a fresh separate environment with the declared artifacts uploaded. Each assessment
records the source trial and the digest of the artifacts it assessed.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from datetime import UTC, datetime
from pathlib import Path

from harbor import Trial, TrialConfig
from harbor.models.trial.config import AgentConfig, SourceTrialConfig
from harbor.models.trial.config import TaskConfig as TrialTaskConfig
from harbor.trial.regrade import check_task_regradable
from sqlalchemy import Engine

from synth_pipelines.agents.platform_access import PlatformAccess
from synth_pipelines.config import Settings
from synth_pipelines.contracts.assessment import Assessment
from synth_pipelines.contracts.dataset import TaskRef
from synth_pipelines.contracts.outcome_classes import classify
from synth_pipelines.contracts.profile import PinnedProfile
from synth_pipelines.contracts.run_spec import RunSpec
from synth_pipelines.contracts.trial import TrialOutcome
from synth_pipelines.judging.assessing import Assessor, assessment
from synth_pipelines.registry.task_packages import load_task, materialize_task
from synth_pipelines.runtime.admission import PoolAdmission, ResourceAdmission, WorkerPool
from synth_pipelines.runtime.batch_plan import plan_batch
from synth_pipelines.runtime.harbor_trials import (
    AttemptContext,
    environment_config,
    verifier_config,
)
from synth_pipelines.runtime.trial_batch import demand_for, execution_settings
from synth_pipelines.runtime.trial_records import (
    archive_trial,
    directory_digest,
    read_rationale,
    restore_trial,
)
from synth_pipelines.storage.objectstore import ObjectStore


class RegradeRefusedError(ValueError):
    pass


def regrade_refusal(task: TaskRef, task_dir: Path) -> str | None:
    """Why this task's retained work cannot be assessed again, naming what to change."""
    reason = check_task_regradable(task_dir)
    if reason is not None:
        return f"task {task.name} cannot be regraded: {reason}"
    if not load_task(task_dir).config.artifacts:
        return (
            f"task {task.name} cannot be regraded: it declares no artifacts; list every actor "
            'output its verifier reads in task.toml, e.g. artifacts = ["/app/result.txt"]'
        )
    return None


def task_dirs_for(
    engine: Engine, store: ObjectStore, spec: RunSpec, index: int, work_dir: Path
) -> dict[int, tuple[TaskRef, Path]]:
    """The batch's tasks, materialized from the run's pinned task versions."""
    plan = plan_batch(engine, spec, index)
    return {
        group.index: (group.task, materialize_task(store, group.task, work_dir / "tasks"))
        for group in plan.groups
    }


def check_regradable(tasks: dict[int, tuple[TaskRef, Path]]) -> None:
    for task, task_dir in tasks.values():
        refusal = regrade_refusal(task, task_dir)
        if refusal is not None:
            raise RegradeRefusedError(refusal)


async def _regrade_one(
    outcome: TrialOutcome,
    task: TaskRef,
    task_dir: Path,
    spec: RunSpec,
    judge: PinnedProfile | None,
    regrade_id: str,
    store: ObjectStore,
    deployment: Settings,
) -> Assessment:
    workspace = deployment.work_dir / "regrades" / regrade_id / outcome.attempt_id
    shutil.rmtree(workspace, ignore_errors=True)
    source = await asyncio.to_thread(
        restore_trial, store, outcome.trial_key, outcome.trial_sha256, workspace / "source"
    )
    if directory_digest(source / "artifacts") != outcome.artifacts_digest:
        raise RegradeRefusedError(
            f"the retained artifacts of {outcome.attempt_id} no longer match their recorded "
            f"digest {outcome.artifacts_digest}"
        )
    attempt = AttemptContext(
        run_id=spec.run_id,
        batch=outcome.batch,
        attempt_id=outcome.attempt_id,
        group_index=outcome.group_index,
        attempt_index=outcome.attempt_index,
        task=task,
        task_dir=task_dir,
        owner=spec.owner,
    )
    trials_dir = workspace / "trials"
    settings = execution_settings(spec)
    config = TrialConfig(
        task=TrialTaskConfig(path=task_dir),
        trial_name=f"{outcome.attempt_id}.{regrade_id}",
        trials_dir=trials_dir,
        source_trial=SourceTrialConfig(action="regrade", type="local", path=source),
        agent=AgentConfig(name="nop"),
        environment=environment_config(settings, deployment, *([judge.profile()] if judge else [])),
        verifier=verifier_config(
            attempt, settings, judge, PlatformAccess.of(deployment), verify=True
        ),
    )
    result = await (await Trial.create(config)).run()
    trial_dir = trials_dir / config.trial_name
    rationale = read_rationale(trial_dir)
    archive_trial(
        store, trial_dir, f"runs/{spec.run_id}/regrades/{regrade_id}/{outcome.attempt_id}.tar.gz"
    )
    shutil.rmtree(workspace, ignore_errors=True)
    rewards = result.verifier_result.rewards if result.verifier_result else None
    error = result.exception_info
    # A regrade runs no agent, and its trial cannot tell a verifier the retained work
    # stopped from one its task broke: its exclusions are this assessor's (with their
    # reason), and the attempt's own outcome stands as it was.
    ending = classify(
        error.exception_type if error else None,
        error.exception_message if error else None,
        verified=True,
        reward_found=rewards is not None,
        agent_started=False,
    )
    return assessment(
        outcome,
        Assessor.of(judge),
        assessment_id=f"{outcome.attempt_id}.{regrade_id}",
        rewards_json=json.dumps(rewards, sort_keys=True) if rewards is not None else None,
        rationale=rationale,
        error=(ending.error_class, ending.reason),
        assessed_at=datetime.now(UTC),
    )


async def regrade_batch(
    engine: Engine,
    store: ObjectStore,
    spec: RunSpec,
    index: int,
    outcomes: list[TrialOutcome],
    judge: PinnedProfile | None,
    regrade_id: str,
    deployment: Settings,
) -> list[Assessment]:
    """Every outcome assessed again on this deployment's host, each judge's sandbox
    admitted like an attempt: within the run's budget and the worker pool's, which it
    shares with every running batch."""
    tasks = await asyncio.to_thread(task_dirs_for, engine, store, spec, index, deployment.work_dir)
    check_regradable(tasks)
    settings = execution_settings(spec)
    admission = ResourceAdmission(settings.budget)
    pool_admission = PoolAdmission(engine, WorkerPool.configured(deployment))

    async def one(outcome: TrialOutcome) -> Assessment:
        task, task_dir = tasks[outcome.group_index]
        demand, what = demand_for(task_dir, settings), f"regrade of task {task.name}"
        async with (
            admission.admit(demand, what),
            pool_admission.admit(demand, what, run_id=spec.run_id, attempt_id=outcome.attempt_id),
        ):
            return await _regrade_one(
                outcome, task, task_dir, spec, judge, regrade_id, store, deployment
            )

    return list(await asyncio.gather(*(one(outcome) for outcome in outcomes)))
