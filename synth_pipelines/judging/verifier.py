"""A judge profile as a Harbor verifier: it assesses the actor's declared outputs in the
separate verifier environment, with the task's own assessment context and its own scoped
model access, and answers in Harbor's reward format.

Harbor loads it with `VerifierConfig(import_path=...)`, for an evaluation with an explicit
judge and for a regrade of retained work alike."""

from __future__ import annotations

import json
import math
import shlex
from datetime import UTC, datetime
from typing import Any

from harbor.models.task.task import Task
from harbor.models.trial.paths import EnvironmentPaths
from harbor.models.verifier.result import VerifierResult
from harbor.verifier.base import BaseVerifier
from harbor.verifier.verifier import RewardFileNotFoundError, VerifierOutputParseError

from synth_pipelines.agents.model_route import check_model_route
from synth_pipelines.agents.platform_access import PlatformAccess
from synth_pipelines.agents.session import AttemptIdentity, run_profile
from synth_pipelines.contracts.profile import PinnedProfile
from synth_pipelines.judging.instruction import (
    CONTEXT_DIR,
    RATIONALE_PATH,
    VERDICT_PATH,
    judge_instruction,
)

IMPORT_PATH = "synth_pipelines.judging.verifier:JudgeVerifier"
REWARD_TEXT_PATH = "/logs/verifier/reward.txt"


def _artifact_paths(task: Task) -> list[str]:
    return [a if isinstance(a, str) else a.source for a in task.config.artifacts]


def parse_verdict(json_text: str | None, plain_text: str | None) -> dict[str, float]:
    """Harbor's reward format: reward.json (name -> finite number) wins over reward.txt."""
    if json_text is not None:
        try:
            rewards = json.loads(json_text)
        except json.JSONDecodeError as error:
            raise VerifierOutputParseError(
                f"the judge's reward.json is not JSON: {error}"
            ) from None
        if (
            not isinstance(rewards, dict)
            or not rewards
            or not all(isinstance(v, int | float) and math.isfinite(v) for v in rewards.values())
        ):
            raise VerifierOutputParseError(
                f"the judge's reward.json must map names to finite numbers, got {json_text!r}"
            )
        return {str(k): float(v) for k, v in rewards.items()}
    if plain_text is not None:
        try:
            value = float(plain_text.strip())
        except ValueError:
            raise VerifierOutputParseError(
                f"the judge's reward.txt is not a number: {plain_text!r}"
            ) from None
        if math.isfinite(value):
            return {"reward": value}
        raise VerifierOutputParseError(f"the judge's reward {value} is not finite")
    raise RewardFileNotFoundError(f"the judge wrote neither {VERDICT_PATH} nor {REWARD_TEXT_PATH}")


class JudgeVerifier(BaseVerifier):
    def __init__(
        self,
        *,
        judge: dict[str, Any],
        identity: dict[str, Any],
        platform: PlatformAccess,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.judge = PinnedProfile.model_validate(judge)
        self.identity = AttemptIdentity.model_validate(identity)
        self.platform = platform

    async def _read(self, path: str) -> str | None:
        found = await self.environment.exec(f"cat {shlex.quote(path)}", user="root")
        return found.stdout if found.return_code == 0 else None

    async def verify(self) -> VerifierResult:
        profile = self.judge.profile()
        if profile.role != "judge":
            raise ValueError(f"profile {profile.ref} is an {profile.role} profile, not a judge")
        environment = self.environment
        await environment.exec(
            f"rm -f {VERDICT_PATH} {REWARD_TEXT_PATH} {RATIONALE_PATH}; "
            f"mkdir -p /logs/verifier {CONTEXT_DIR}",
            user="root",
        )
        if self.task.paths.tests_dir.is_dir():
            await environment.upload_dir(self.task.paths.tests_dir, CONTEXT_DIR)
        workdir = ((await environment.exec("pwd")).stdout or "").strip() or "/"
        instruction = judge_instruction(self.task.instruction, workdir, _artifact_paths(self.task))
        identity = self.identity.in_trial(environment.context_id)
        started = datetime.now(UTC)
        outcome = await run_profile(
            environment,
            self.judge,
            instruction,
            identity,
            self.trial_paths.verifier_dir / "judge",
            self.platform,
            timeout_sec=self.task.config.verifier.timeout_sec,
            log_dir="/logs/verifier/judge",
        )
        await check_model_route(
            self.platform,
            identity.run_id,
            identity.attempt_id,
            identity.role,
            started,
            outcome.result.exit_code,
        )
        verifier_dir = EnvironmentPaths.for_os(self.task.config.environment.os).verifier_dir
        if not environment.is_path_mounted(verifier_dir, self.trial_paths.verifier_dir):
            await environment.download_dir(str(verifier_dir), self.trial_paths.verifier_dir)
        try:
            rewards = parse_verdict(
                await self._read(VERDICT_PATH), await self._read(REWARD_TEXT_PATH)
            )
        except RewardFileNotFoundError as error:
            log = (await self._read(outcome.launch.log_path)) or "(no output)"
            raise RewardFileNotFoundError(
                f"{error}; the judge {profile.ref} exited with {outcome.result.exit_code}, its "
                f"output ends with: {log[-1500:]}"
            ) from None
        return VerifierResult(rewards=rewards)
