"""One attempt as one Harbor trial, and its outcome as a TrialOutcome row."""

from __future__ import annotations

import asyncio
import json
import shutil
import time
import uuid
from dataclasses import dataclass
from datetime import UTC
from pathlib import Path

from harbor import Trial, TrialConfig
from harbor.models.task.task import Task
from harbor.models.trial.config import AgentConfig, EnvironmentConfig, VerifierConfig
from harbor.models.trial.config import TaskConfig as TrialTaskConfig
from harbor.models.trial.result import TrialResult

from synth_pipelines.agents.engines import engine_runtime
from synth_pipelines.agents.harbor_agent import IMPORT_PATH as PROFILE_AGENT
from synth_pipelines.agents.platform_access import PlatformAccess
from synth_pipelines.agents.session import AttemptIdentity
from synth_pipelines.config import Settings
from synth_pipelines.contracts.dataset import TaskRef
from synth_pipelines.contracts.outcome_classes import AGENT_CAUSED_REWARD, classify
from synth_pipelines.contracts.plan import ExecutionSettings
from synth_pipelines.contracts.profile import PinnedProfile, Profile
from synth_pipelines.contracts.trial import TrialOutcome
from synth_pipelines.judging.verifier import IMPORT_PATH as JUDGE_VERIFIER
from synth_pipelines.runtime.docker_environment import IMPORT_PATH as DOCKER_ENVIRONMENT
from synth_pipelines.runtime.trial_records import archive_trial, directory_digest, read_rationale
from synth_pipelines.sandbox.options import HostSettings, ImageCacheOptions
from synth_pipelines.sandbox.verification import isolate_verification
from synth_pipelines.storage.objectstore import ObjectRef, ObjectStore

LOCAL_ENVIRONMENT = "synth_pipelines.sandbox.bwrap:BwrapEnvironment"


@dataclass(frozen=True)
class AttemptContext:
    run_id: str
    batch: str
    attempt_id: str
    group_index: int
    attempt_index: int
    task: TaskRef
    task_dir: Path
    owner: str


@dataclass(frozen=True)
class Actor:
    """The pinned recipe and the model snapshot it is bound to for these attempts."""

    pinned: PinnedProfile
    profile: Profile
    model: str | None

    @classmethod
    def of(cls, pinned: PinnedProfile, model: str | None) -> Actor:
        profile = pinned.profile()
        return cls(pinned, profile, model or profile.model)


def environment_config(
    settings: ExecutionSettings, deployment: Settings, *profiles: Profile
) -> EnvironmentConfig:
    """The environment of the agent and of the separate verifier alike, on this
    deployment's host; locally it binds what the launched engines of these profiles need
    (read-only) into both."""
    choice, overrides = settings.environment, settings.overrides
    kwargs: dict[str, object] = dict(choice.kwargs)
    if choice.provider == "local":
        location = {"import_path": LOCAL_ENVIRONMENT}
        host = HostSettings.model_validate(deployment, from_attributes=True)
        kwargs.update(host.model_dump(mode="json"))
        engines = sorted({profile.engine for profile in profiles if profile.launched})
        found = {
            mount.target: mount
            for engine in engines
            for mount in engine_runtime(engine).mounts(deployment.claude_code)
        }
        if found:
            kwargs["read_only_binds"] = [mount.as_bind() for mount in found.values()]
    elif choice.provider == "docker":
        location = {"import_path": DOCKER_ENVIRONMENT}
        cache = ImageCacheOptions.model_validate(deployment, from_attributes=True)
        kwargs |= {**cache.model_dump(), "project_root": deployment.project_root}
    elif ":" in choice.provider:
        location = {"import_path": choice.provider}
    else:
        location = {"type": choice.provider}
    return EnvironmentConfig(
        **location,
        kwargs=kwargs,
        override_cpus=overrides.cpus,
        override_memory_mb=overrides.memory_mb,
        override_storage_mb=overrides.storage_mb,
    )


def agent_config(
    actor: Actor, attempt: AttemptContext, settings: ExecutionSettings, platform: PlatformAccess
) -> AgentConfig:
    # The timeout Harbor enforces (the plan's, else the task's), which also bounds the
    # life of the attempt's scoped token.
    timeout = settings.timeouts.agent_sec or Task(attempt.task_dir).config.agent.timeout_sec
    if not actor.profile.launched:
        return AgentConfig(name=actor.profile.engine, override_timeout_sec=timeout)
    if actor.model is None:
        raise ValueError(
            f"profile {actor.profile.ref} binds no model; set 'model' in the profile or pass "
            "--model when starting the run"
        )
    identity = AttemptIdentity(
        run_id=attempt.run_id,
        attempt_id=attempt.attempt_id,
        batch=attempt.batch,
        owner=attempt.owner,
        task_name=attempt.task.name,
        model=actor.model,
        role=actor.profile.role,
        sampling_seed=settings.seed,
        sampling_temperature=settings.temperature,
        sampling_limits=settings.sampling_limits,
    )
    return AgentConfig(
        import_path=PROFILE_AGENT,
        model_name=actor.model,
        # Platform model ids are not LiteLLM names; parsing them would only cost a lookup.
        skip_model_parsing=True,
        kwargs={
            "profile": actor.pinned.model_dump(),
            "identity": identity.model_dump(),
            "platform": platform,
            "timeout_sec": timeout,
        },
        override_timeout_sec=timeout,
    )


def verifier_config(
    attempt: AttemptContext,
    settings: ExecutionSettings,
    judge: PinnedProfile | None,
    platform: PlatformAccess,
    *,
    verify: bool,
) -> VerifierConfig:
    """The task's own verifier, or a judge profile in its place."""
    timeout = settings.timeouts.verifier_sec
    if judge is None or not verify:
        return VerifierConfig(disable=not verify, override_timeout_sec=timeout)
    profile = judge.profile()
    if profile.model is None:
        raise ValueError(f"judge profile {profile.ref} binds no model")
    identity = AttemptIdentity(
        run_id=attempt.run_id,
        attempt_id=attempt.attempt_id,
        batch=attempt.batch,
        owner=attempt.owner,
        task_name=attempt.task.name,
        model=profile.model,
        role="judge",
        sampling_seed=settings.seed,
    )
    return VerifierConfig(
        import_path=JUDGE_VERIFIER,
        kwargs={
            "judge": judge.model_dump(),
            "identity": identity.model_dump(),
            "platform": platform,
        },
        override_timeout_sec=timeout,
    )


def trial_config(
    attempt: AttemptContext,
    actor: Actor,
    settings: ExecutionSettings,
    trials_dir: Path,
    deployment: Settings,
    *,
    verify: bool,
    judge: PinnedProfile | None = None,
) -> TrialConfig:
    platform = PlatformAccess.of(deployment)
    return TrialConfig(
        task=TrialTaskConfig(path=attempt.task_dir),
        trial_name=attempt.attempt_id,
        trials_dir=trials_dir,
        agent=agent_config(actor, attempt, settings, platform),
        environment=environment_config(
            settings, deployment, actor.profile, *([judge.profile()] if judge else [])
        ),
        verifier=verifier_config(attempt, settings, judge, platform, verify=verify),
    )


def attempt_identity(attempt: AttemptContext, actor: Actor) -> dict[str, object]:
    """The fields that name an attempt in its outcome row, whatever became of its trial."""
    return {
        "run_id": attempt.run_id,
        "batch": attempt.batch,
        "attempt_id": attempt.attempt_id,
        "group_index": attempt.group_index,
        "attempt_index": attempt.attempt_index,
        "task_position": attempt.task.position,
        "task_name": attempt.task.name,
        "task_digest": attempt.task.digest,
        "actor_digest": actor.pinned.digest,
        "effective_model": actor.model,
    }


def agent_started(result: TrialResult) -> bool:
    """Whether the trial's agent phase began (of any step): from then on the sandbox
    holds what the agent did."""
    phases = [result.agent_execution, *(step.agent_execution for step in result.step_results or [])]
    return any(phase is not None and phase.started_at is not None for phase in phases)


def outcome_from_result(
    attempt: AttemptContext,
    actor: Actor,
    result: TrialResult,
    trial_dir: Path,
    archive: ObjectRef,
    duration_sec: float,
    *,
    verified: bool,
) -> TrialOutcome:
    rewards = result.verifier_result.rewards if result.verifier_result else None
    error = result.exception_info
    ending = classify(
        error.exception_type if error else None,
        error.exception_message if error else None,
        verified=verified,
        reward_found=rewards is not None,
        agent_started=agent_started(result),
    )
    if ending.agent_caused:
        rewards = {"reward": AGENT_CAUSED_REWARD}
    error_class, error_reason = ending.error_class, ending.reason
    return TrialOutcome(
        **attempt_identity(attempt, actor),
        trial_name=result.trial_name,
        trial_id=str(result.id),
        status="completed" if error is None else "failed",
        rewards_json=json.dumps(rewards, sort_keys=True) if rewards is not None else None,
        rationale=read_rationale(trial_dir),
        exception_type=error.exception_type if error else None,
        exception_message=error.exception_message[:2000] if error else None,
        error_class=error_class,
        error_reason=error_reason[:2000] if error_reason else None,
        trial_key=archive.key,
        trial_sha256=archive.sha256,
        artifacts_digest=directory_digest(trial_dir / "artifacts"),
        started_at=result.started_at.astimezone(UTC) if result.started_at else None,
        finished_at=result.finished_at.astimezone(UTC) if result.finished_at else None,
        duration_sec=duration_sec,
    )


def unprepared_outcome(
    attempt: AttemptContext,
    actor: Actor,
    error: Exception,
    store: ObjectStore,
    trial_dir: Path,
    started: float,
) -> TrialOutcome:
    """The outcome of an attempt whose trial could not be created: failed, with the
    reason in its record (`exception.txt`, as Harbor writes one) and in the row."""
    trial_id = str(uuid.uuid4())
    trial_dir.mkdir(parents=True, exist_ok=True)
    message = str(error)
    (trial_dir / "exception.txt").write_text(f"{type(error).__name__}: {message}\n")
    ref = archive_trial(
        store, trial_dir, f"runs/{attempt.run_id}/trials/{attempt.attempt_id}/{trial_id}.tar.gz"
    )
    shutil.rmtree(trial_dir, ignore_errors=True)
    ending = classify(
        type(error).__name__, message, verified=False, reward_found=False, agent_started=False
    )
    error_class, error_reason = ending.error_class, ending.reason
    return TrialOutcome(
        **attempt_identity(attempt, actor),
        trial_name=attempt.attempt_id,
        trial_id=trial_id,
        status="failed",
        rewards_json=None,
        rationale=None,
        error_class=error_class,
        error_reason=error_reason,
        exception_type=type(error).__name__,
        exception_message=message[:2000],
        trial_key=ref.key,
        trial_sha256=ref.sha256,
        artifacts_digest=None,
        started_at=None,
        finished_at=None,
        duration_sec=time.monotonic() - started,
    )


async def run_attempt(
    attempt: AttemptContext,
    actor: Actor,
    settings: ExecutionSettings,
    store: ObjectStore,
    trials_dir: Path,
    deployment: Settings,
    *,
    verify: bool,
    judge: PinnedProfile | None = None,
) -> TrialOutcome:
    """Run the attempt's trial on this deployment's host, retain its record, and discard
    the local copy."""
    trial_dir = trials_dir / attempt.attempt_id
    shutil.rmtree(trial_dir, ignore_errors=True)
    started = time.monotonic()
    try:
        trial = await Trial.create(
            trial_config(
                attempt, actor, settings, trials_dir, deployment, verify=verify, judge=judge
            )
        )
    except Exception as error:
        # The task's environment could not even be prepared (Harbor builds it while
        # creating the trial): that fails this attempt, with its reason, not the batch.
        return unprepared_outcome(attempt, actor, error, store, trial_dir, started)
    isolate_verification(trial)
    result = await trial.run()
    # Off the event loop: compressing and storing the record, and reading it back, would
    # stall every other attempt of the batch meanwhile.
    return await asyncio.to_thread(
        _retained_outcome, attempt, actor, result, store, trial_dir, started, verify
    )


def _retained_outcome(
    attempt: AttemptContext,
    actor: Actor,
    result: TrialResult,
    store: ObjectStore,
    trial_dir: Path,
    started: float,
    verify: bool,
) -> TrialOutcome:
    ref = archive_trial(
        store, trial_dir, f"runs/{attempt.run_id}/trials/{attempt.attempt_id}/{result.id}.tar.gz"
    )
    outcome = outcome_from_result(
        attempt,
        actor,
        result,
        trial_dir,
        ref,
        time.monotonic() - started,
        verified=verify,
    )
    shutil.rmtree(trial_dir, ignore_errors=True)
    return outcome
