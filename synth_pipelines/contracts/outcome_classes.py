"""What an attempt's end means: assessed, a platform error, or a task/environment error.

Only assessed attempts (the verifier or judge produced a reward) enter pass@1, mean
reward and GRPO groups. An agent that simply failed its task (its model answered, the
work was wrong, it ran out of time) is assessed, with the reward its work earned. An
attempt the platform failed (its harness never reached its model or stopped because the
model route failed, its sandbox did not start, a platform call timed out) says nothing
about the policy; neither does one whose task or verifier could not produce a reward.
Both are counted apart, with their reason. The table below is decided per exception type
(Harbor's names and ours); docs/architecture.md lists it.
"""

from __future__ import annotations

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


def classify(
    exception_type: str | None,
    exception_message: str | None,
    *,
    verified: bool,
    reward_found: bool,
) -> tuple[ErrorClass | None, str | None]:
    """(class, reason) of a trial's end. A verified trial whose verifier wrote no reward,
    with no other cause, is a task error."""
    found = error_class(exception_type)
    if found is not None:
        return found, f"{exception_type}: {exception_message or ''}".strip()
    if verified and not reward_found:
        cause = f" after {exception_type}" if exception_type else ""
        return "task", f"the verifier produced no reward{cause}"
    return None, None
