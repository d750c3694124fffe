"""A Harbor agent that runs a pinned profile: Harbor-managed trials use the same launcher
as `synth agent run` (loaded with `AgentConfig(import_path=...)`)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from harbor.agents.base import BaseAgent
from harbor.agents.installed.base import NonZeroAgentExitCodeError
from harbor.environments.base import BaseEnvironment
from harbor.models.agent.context import AgentContext

from synth_pipelines.agents.model_route import check_model_route
from synth_pipelines.agents.platform_access import PlatformAccess
from synth_pipelines.agents.session import AttemptIdentity, run_profile
from synth_pipelines.contracts.profile import PinnedProfile

IMPORT_PATH = "synth_pipelines.agents.harbor_agent:ProfileAgent"


class RequiredOutputsMissingError(RuntimeError):
    """The harness finished without producing an output its profile requires."""


class ProfileAgent(BaseAgent):
    def __init__(
        self,
        logs_dir: Path,
        model_name: str | None = None,
        logger: Any = None,
        *,
        profile: dict[str, str],
        identity: dict[str, object],
        platform: PlatformAccess,
        timeout_sec: float | None = None,
        **kwargs: Any,
    ) -> None:
        self.pinned = PinnedProfile.model_validate(profile)
        self.identity = AttemptIdentity.model_validate(identity)
        self.platform = platform
        self.timeout_sec = timeout_sec
        super().__init__(
            logs_dir, model_name=model_name or self.identity.model, logger=logger, **kwargs
        )

    @staticmethod
    def name() -> str:
        return "synth-profile"

    def version(self) -> str | None:
        return f"{self.pinned.name}@{self.pinned.version}"

    async def setup(self, environment: BaseEnvironment) -> None:
        self.pinned.profile()

    async def run(
        self, instruction: str, environment: BaseEnvironment, context: AgentContext
    ) -> None:
        # Harbor gives each trial (each execution of the attempt) its own id; calls carry
        # it, so a re-executed attempt's evidence never mixes with an earlier execution's.
        identity = self.identity.in_trial(self.context_id)
        started = datetime.now(UTC)
        outcome = await run_profile(
            environment,
            self.pinned,
            instruction,
            identity,
            self.logs_dir,
            self.platform,
            timeout_sec=self.timeout_sec,
        )
        result = outcome.result
        context.metadata = {
            **(context.metadata or {}),
            "profile": f"{self.pinned.name}@{self.pinned.version}",
            "profile_digest": self.pinned.digest,
            "launch_digest": outcome.template.digest(),
            "exit_code": result.exit_code,
            "missing_outputs": list(result.missing_outputs),
        }
        await check_model_route(
            self.platform,
            identity.run_id,
            identity.attempt_id,
            identity.role,
            started,
            result.exit_code,
        )
        if result.exit_code != 0:
            raise NonZeroAgentExitCodeError(
                f"{outcome.launch.engine} exited with {result.exit_code}; see "
                f"{outcome.launch.log_path}"
            )
        if result.missing_outputs:
            raise RequiredOutputsMissingError(
                f"required outputs missing after the run: {', '.join(result.missing_outputs)}"
            )
