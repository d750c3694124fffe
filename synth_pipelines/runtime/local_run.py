"""`synth agent run`: one profile on one task directory, in the local sandbox.

The environment is built from the task exactly as Harbor builds a trial's, and the
profile runs through the same `run_profile` a Harbor-managed trial uses.
"""

from __future__ import annotations

import shutil
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from harbor.models.task.config import NetworkMode, NetworkPolicy
from harbor.models.trial.paths import TrialPaths

from synth_pipelines.agents.engines import engine_runtime
from synth_pipelines.agents.platform_access import PlatformAccess
from synth_pipelines.agents.session import AttemptIdentity, LaunchOutcome, run_profile
from synth_pipelines.config import Settings
from synth_pipelines.contracts.profile import PinnedProfile
from synth_pipelines.registry.task_packages import load_task
from synth_pipelines.sandbox.bwrap import BwrapEnvironment
from synth_pipelines.sandbox.options import HostSettings


@dataclass(frozen=True)
class LocalRun:
    identity: AttemptIdentity
    outcome: LaunchOutcome
    output_dir: Path
    workspace: Path


async def run_locally(
    pinned: PinnedProfile,
    task_dir: Path,
    model: str,
    output_dir: Path,
    deployment: Settings,
    timeout_sec: float | None = None,
) -> LocalRun:
    profile = pinned.profile()
    if not profile.launched:
        raise ValueError(
            f"profile {profile.ref} uses engine {profile.engine!r}, which Harbor runs itself; "
            "`synth agent run` runs claude-code and builtin profiles"
        )
    task = load_task(task_dir)
    identity = AttemptIdentity(
        run_id=f"local-{datetime.now(UTC):%Y%m%d}",
        attempt_id=f"local-{uuid.uuid4().hex[:12]}",
        owner=deployment.owner,
        task_name=task.name,
        model=model,
        role=profile.role,
    )
    paths = TrialPaths(output_dir)
    paths.mkdir()  # type: ignore[no-untyped-call]  # Harbor leaves TrialPaths.mkdir unannotated
    environment = BwrapEnvironment(
        environment_dir=task.paths.environment_dir,
        environment_name=task.name,
        session_id=f"{identity.attempt_id}__env",
        trial_paths=paths,
        task_env_config=task.config.environment,
        network_policy=NetworkPolicy(network_mode=NetworkMode.NO_NETWORK),
        read_only_binds=[
            m.as_bind() for m in engine_runtime(profile.engine).mounts(deployment.claude_code)
        ],
        **HostSettings.model_validate(deployment, from_attributes=True).model_dump(),
    )
    await environment.start(force_build=False)
    workspace = output_dir / "workspace"
    try:
        outcome = await run_profile(
            environment,
            pinned,
            task.instruction,
            identity,
            paths.agent_dir,
            PlatformAccess.of(deployment),
            timeout_sec=timeout_sec or task.config.agent.timeout_sec,
        )
        workdir = outcome.launch.workdir
        shutil.rmtree(workspace, ignore_errors=True)
        await environment.download_dir(workdir, workspace)
    finally:
        await environment.stop(delete=True)
    return LocalRun(identity, outcome, output_dir, workspace)
