"""One command inside a running sandbox, in a leaf cgroup of its own.

The leaf lets a timeout kill exactly the command's processes, and tells a command the
kernel killed for memory from one that failed: the sandbox's limits bound the whole
sandbox, so the kill is reported against the limit that caused it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Mapping

from harbor.environments.base import ExecResult, OutputCallback

from synth_pipelines.sandbox.commands import CommandTimedOut, Process, run_to_completion
from synth_pipelines.sandbox.errors import MemoryLimitExceededError, SandboxCommandTimeoutError
from synth_pipelines.sandbox.identity import Identity
from synth_pipelines.sandbox.limits import SandboxCgroup
from synth_pipelines.sandbox.namespace import SandboxInit
from synth_pipelines.sandbox.seccomp import filter_program

KILLED_BY_SIGKILL = 128 + signal.SIGKILL


async def run_in_leaf(
    init: SandboxInit,
    cgroup: SandboxCgroup | None,
    leaf: str,
    command: str,
    *,
    identity: Identity,
    cwd: str,
    env: Mapping[str, str],
    timeout_sec: int | None,
    on_output: OutputCallback | None,
    stdin_fd: int | None,
    stdout_fd: int | None,
    sandbox: str,
    memory_mb: int | None,
) -> ExecResult:
    """Run `command` with bash as `identity`, in the cgroup `leaf` made for it (and
    removed after) when the sandbox has a cgroup; `sandbox` and its `memory_mb` name
    them in errors."""
    procs_files = cgroup.new_leaf(leaf) if cgroup is not None else []
    start = init.command(
        command,
        cwd=cwd,
        env=env,
        uid=identity.uid,
        gid=identity.gid,
        procs_files=procs_files,
        seccomp=filter_program(),
        capabilities=identity.capabilities,
    )

    async def kill(process: Process) -> None:
        # The launcher and the command it forked first: a command that has not yet
        # joined its leaf cgroup is not among the leaf's processes.
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
        if cgroup is not None:
            await asyncio.to_thread(cgroup.kill, leaf)

    try:
        completed = await run_to_completion(
            start,
            timeout_sec=timeout_sec,
            kill=kill,
            on_output=on_output,
            stdin_fd=stdin_fd,
            stdout_fd=stdout_fd,
        )
    except CommandTimedOut:
        raise SandboxCommandTimeoutError(
            f"Command timed out after {timeout_sec} seconds in sandbox "
            f"{sandbox}; it and every process it started were killed: "
            f"{_abbreviate(command)}"
        ) from None
    finally:
        oom_kills = cgroup.oom_kills(leaf) if cgroup is not None else 0
        if cgroup is not None:
            cgroup.remove_leaf(leaf)
    stderr = completed.stderr
    if oom_kills:
        message = (
            f"Sandbox {sandbox} exceeded its memory limit of "
            f"{memory_mb} MB: the kernel killed {oom_kills} process(es) of "
            f"{_abbreviate(command)}. Raise [environment].memory_mb in task.toml "
            "(or override_memory_mb) or make the command use less memory."
        )
        if completed.return_code == KILLED_BY_SIGKILL:
            raise MemoryLimitExceededError(message)
        stderr = f"{stderr}\n{message}\n"
    return ExecResult(
        stdout=completed.stdout or None,
        stderr=stderr or None,
        return_code=completed.return_code,
    )


def _abbreviate(command: str, limit: int = 200) -> str:
    flat = " ".join(command.split())
    return repr(flat if len(flat) <= limit else f"{flat[:limit]}...")
