"""`synth agent run`: one profile on one task directory, in the local sandbox.

The environment is built from the task exactly as Harbor builds a trial's, and the
profile runs through the same `run_profile` a Harbor-managed trial uses. Its token is a
session's the gateway grants the operator's key (`OpenSession`): the attempt is that
session's, sampling as its owner, and nothing here needs the platform's signing key.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from harbor.models.task.config import NetworkMode, NetworkPolicy
from harbor.models.trial.paths import TrialPaths

from synth_pipelines.agents.engines import engine_runtime
from synth_pipelines.agents.platform_access import PlatformAccess
from synth_pipelines.agents.session import (
    AttemptIdentity,
    AttemptToken,
    LaunchOutcome,
    run_profile,
    token_lifetime,
)
from synth_pipelines.config import Settings
from synth_pipelines.contracts.interactive_session import MAX_SESSION_SEC
from synth_pipelines.contracts.profile import PinnedProfile
from synth_pipelines.contracts.scoped_token import AttemptScope
from synth_pipelines.registry.task_packages import load_task
from synth_pipelines.sandbox.bwrap import BwrapEnvironment
from synth_pipelines.sandbox.options import HostSettings


@dataclass(frozen=True)
class AttemptSession:
    """What a local attempt samples as: its token, the scope the token grants, and the
    capture proxy it is for."""

    scope: AttemptScope
    token: AttemptToken
    proxy_url: str


OpenSession = Callable[[str, int], AttemptSession]
"""A session for a model, for so many seconds (the gateway's `POST /v1/sessions`)."""


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
    open_session: OpenSession,
    timeout_sec: float | None = None,
) -> LocalRun:
    profile = pinned.profile()
    if not profile.launched:
        raise ValueError(
            f"profile {profile.ref} uses engine {profile.engine!r}, which Harbor runs itself; "
            "`synth agent run` runs claude-code and builtin profiles"
        )
    task = load_task(task_dir)
    timeout_sec = timeout_sec or task.config.agent.timeout_sec
    ttl_sec = min(token_lifetime(timeout_sec), MAX_SESSION_SEC)
    session = await asyncio.to_thread(open_session, model, ttl_sec)
    identity = AttemptIdentity(**session.scope.model_dump(), task_name=task.name)
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
    try:
        await environment.start(force_build=False)
    except BaseException:
        # `run_profile` revokes the token once it runs; a sandbox that never started must too.
        ended = f"attempt {identity.attempt_id} never started"
        await asyncio.to_thread(session.token.revoke, ended)
        raise
    workspace = output_dir / "workspace"
    try:
        outcome = await run_profile(
            environment,
            pinned,
            task.instruction,
            identity,
            paths.agent_dir,
            PlatformAccess.of(deployment).model_copy(update={"proxy_url": session.proxy_url}),
            timeout_sec=timeout_sec,
            token=session.token,
        )
        workdir = outcome.launch.workdir
        shutil.rmtree(workspace, ignore_errors=True)
        await environment.download_dir(workdir, workspace)
    finally:
        await environment.stop(delete=True)
    return LocalRun(identity, outcome, output_dir, workspace)
