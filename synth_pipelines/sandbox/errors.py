"""What the local sandbox raises, each with the fix in its message.

Harbor classifies trial failures by exception *type name*
(`harbor.models.trial.error_policy`), so names that Harbor already knows are reused
on purpose: `MemoryLimitExceededError` is retried and never graded, like Harbor's own.
"""

from __future__ import annotations

CONTAINER_ENVIRONMENTS = "docker, daytona, modal or e2b"


class UnsupportedTaskError(ValueError):
    """The task needs something the bubblewrap sandbox cannot provide faithfully."""

    def __init__(self, task: str, problem: str) -> None:
        super().__init__(
            f"Task {task!r} cannot run in the local bwrap sandbox: {problem}. "
            f"Run it with a container environment instead ({CONTAINER_ENVIRONMENTS}), "
            "e.g. EnvironmentConfig(type='docker') or `--env docker`."
        )
        self.task = task
        self.problem = problem


class TaskDefinitionError(ValueError):
    """The task's environment cannot be built as written, by this sandbox or any other
    builder (a COPY source missing from, or outside, the build context)."""

    def __init__(self, task: str, problem: str) -> None:
        super().__init__(
            f"Task {task!r} cannot be prepared: {problem}. Fix the task and publish it again."
        )
        self.task = task


class SandboxStartError(RuntimeError):
    """bubblewrap could not create the sandbox."""


class SandboxNotRunningError(RuntimeError):
    """A command or transfer was asked of a sandbox that is not started."""


class SandboxCommandTimeoutError(RuntimeError):
    """A command ran past its timeout; its whole process tree was killed."""


class MemoryLimitExceededError(RuntimeError):
    """The kernel killed a command because the sandbox hit its memory limit."""


class SandboxPathError(ValueError):
    """A transfer named a path the sandbox cannot read or write."""


class SandboxUserError(ValueError):
    """A command asked to run as a user the sandbox does not know."""


class SandboxStorageError(RuntimeError):
    """The size-limited filesystem for the sandbox's writable state could not be set up."""


class SandboxCleanupError(RuntimeError):
    """Part of a stopped sandbox could not be removed (a process that survives SIGKILL,
    a cgroup that stays busy); the sandbox is quarantined instead (`quarantine.py`)."""


class ImageBuildError(RuntimeError):
    """A step of the task's Dockerfile failed while its image was built; the message
    names the task, the step's line and its last output."""
