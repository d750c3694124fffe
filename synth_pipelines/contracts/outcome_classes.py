"""What an attempt's end means: assessed, a platform error, or a task/environment error.

Only assessed attempts (the verifier or judge produced a reward) enter pass@1, mean
reward and GRPO groups. An agent that simply failed its task (its model answered, the
work was wrong, it ran out of time) is assessed, with the reward its work earned. An
attempt the platform failed (its harness never reached its model or stopped because the
model route failed, its sandbox did not start, a platform call timed out) says nothing
about the policy; neither does one whose task or verifier could not produce a reward.
Both are counted apart, with their reason. The table below is decided per exception type
(Harbor's names and ours); docs/architecture.md lists it.

An exclusion must never be the agent's to choose: an agent that knows it is failing
would otherwise leave pass@1 and its GRPO group instead of taking its 0. So a task error
counts only before the agent's phase began (the image, the sandbox, the agent's set-up:
none of it has run the agent yet). Once the agent has run, its sandbox, its files and its
work are all it left behind, and whatever keeps the task's verifier from producing a
reward (its OOM, files it made unremovable, work that hangs, crashes or kills the
verifier, a verifier user it removed) is assessed 0, the reason recorded. Platform
errors stay platform errors in every phase: each is caused outside the sandbox (see
`PLATFORM_ERRORS` and docs/architecture.md for why the agent cannot cause one).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

ErrorClass = Literal["platform", "task"]

PLATFORM_ERRORS = frozenset(
    {
        # ours: the harness's model route (agents/model_route.py, agents/session.py)
        "ModelRouteError",
        "ModelUnavailableError",
        # ours: the local sandbox could not be started or driven
        "SandboxStartError",
        "SandboxNotRunningError",
        "SandboxCommandTimeoutError",
        # Harbor: environments and agent set-up
        "EnvironmentStartTimeoutError",
        "SandboxBuildFailedError",
        "HealthcheckError",
        "AgentSetupTimeoutError",
        "RuntimeRequestError",
        "SSHAccessError",
        "ServiceOperationsUnsupportedError",
        "DownloadVerifierDirError",
        # Harbor: model-API failures its installed agents read from their logs
        "ApiError",
        "ApiRateLimitError",
        "ApiUsageLimitError",
        "ApiInternalServerError",
        "ApiOverloadedError",
        "ApiConnectionClosedError",
        "ApiResponseStalledError",
        "UnknownApiError",
        "ApiProviderResourceNotFoundError",
        "AgentAuthenticationError",
        "ModelNotFoundError",
        "NetworkConnectionError",
        "UnsupportedModelParametersError",
        # the run was cancelled under the attempt
        "CancelledError",
    }
)
TASK_ERRORS = frozenset(
    {
        # ours: the task's environment cannot be reproduced, or asks for what it may not
        "UnsupportedTaskError",
        "TaskDefinitionError",
        "SandboxUserError",
        "SandboxPathError",
        "MemoryLimitExceededError",
        # Harbor: the verifier produced no reward
        "VerifierTimeoutError",
        "RewardFileNotFoundError",
        "RewardFileEmptyError",
        "VerifierOutputParseError",
        "AddTestsDirError",
    }
)
AGENT_OUTCOMES = frozenset(
    {
        "NonZeroAgentExitCodeError",
        "AgentTimeoutError",
        "RequiredOutputsMissingError",
        "ContextWindowExceededError",
        "ContextLengthExceededError",
        "OutputTokenExceededError",
        "OutputLengthExceededError",
        "AgentSafetyRefusalError",
    }
)
"""The agent ended its own way: its work is assessed like any other."""


def error_class(exception_type: str | None) -> ErrorClass | None:
    """The class an exception puts its attempt in; None: the attempt is assessed. An
    exception nobody listed is the platform's, never the policy's."""
    if exception_type is None or exception_type in AGENT_OUTCOMES:
        return None
    if exception_type in TASK_ERRORS:
        return "task"
    return "platform"


AGENT_CAUSED_REWARD = 0.0
"""The reward of an attempt whose own doing kept its verifier from producing one."""


@dataclass(frozen=True)
class Ending:
    """How a trial ended: its class (None: assessed), the reason when it is not an
    ordinary verdict, and whether the agent caused the verifier's silence (then the
    attempt is assessed `AGENT_CAUSED_REWARD`)."""

    error_class: ErrorClass | None
    reason: str | None
    agent_caused: bool = False


def classify(
    exception_type: str | None,
    exception_message: str | None,
    *,
    verified: bool,
    reward_found: bool,
    agent_started: bool,
) -> Ending:
    """How a trial ended. A verified trial whose verifier wrote no reward, with no other
    cause, is a task error; after the agent's phase began, that and every task error are
    the agent's doing."""
    found = error_class(exception_type)
    if found == "platform":
        return Ending("platform", f"{exception_type}: {exception_message or ''}".strip())
    if found == "task":
        reason = f"{exception_type}: {exception_message or ''}".strip()
    elif verified and not reward_found:
        cause = f" after {exception_type}" if exception_type else ""
        reason = f"the verifier produced no reward{cause}"
    else:
        return Ending(None, None)
    if agent_started:
        return Ending(None, f"assessed 0, the agent's doing: {reason}", agent_caused=True)
    return Ending("task", reason)
