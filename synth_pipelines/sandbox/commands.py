"""Running commands to completion (a host process: output, timeout and the kill on the
way out), and the shape of running one inside a sandbox."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from harbor.environments.base import ExecResult, OutputCallback, OutputStream

# A command's background children may keep its stdout open after it exits; output
# written after this grace belongs to them, not to the command.
OUTPUT_GRACE_SEC = 0.5
READ_CHUNK = 65536


@dataclass(frozen=True)
class Completed:
    return_code: int
    stdout: str
    stderr: str


class CommandTimedOut(Exception):
    """The command passed its deadline; `kill` has already run."""


class Process(Protocol):
    """A started command, as `run_to_completion` follows it (`asyncio`'s process is one)."""

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...

    async def wait(self) -> int: ...


class RunInside(Protocol):
    """A command run inside a started sandbox, optionally with stdin and stdout
    connected to host files (`BwrapEnvironment`'s own way to run one)."""

    async def __call__(
        self,
        command: str,
        *,
        timeout_sec: int | None = None,
        user: str | int | None = None,
        stdin_fd: int | None = None,
        stdout_fd: int | None = None,
    ) -> ExecResult: ...


# Starts the command with the given stdin, stdout and stderr descriptors.
Start = Callable[[int, int, int], Awaitable[Process]]


def spawned(argv: Sequence[str], *, env: dict[str, str], pass_fds: Sequence[int] = ()) -> Start:
    """Start `argv` as a host process in a session of its own."""

    async def start(stdin: int, stdout: int, stderr: int) -> Process:
        return await asyncio.create_subprocess_exec(
            *argv,
            env=env,
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            start_new_session=True,
            pass_fds=pass_fds,
        )

    return start


async def run_to_completion(
    start: Start,
    *,
    timeout_sec: float | None,
    kill: Callable[[Process], Awaitable[None]],
    on_output: OutputCallback | None = None,
    stdin_fd: int | None = None,
    stdout_fd: int | None = None,
) -> Completed:
    """Run the command `start` starts, collecting its output; on timeout or cancellation
    call `kill`.

    `kill` must end the whole process tree, not just the command's own process: it is
    awaited before `CommandTimedOut` or the cancellation propagates. `stdin_fd` and
    `stdout_fd`, when given, are host file descriptors the command reads from and
    writes its stdout to (which then is not collected).
    """
    # Our own pipes, not asyncio's: asyncio's `wait()` also waits for its pipes to
    # close, which a backgrounded child holding stdout would postpone indefinitely.
    stdout_read, stdout_write = os.pipe() if stdout_fd is None else (None, stdout_fd)
    stderr_read, stderr_write = os.pipe()
    stdin = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC) if stdin_fd is None else stdin_fd
    # The start is never abandoned half-way: once asked for, the command may be running
    # before its pid is known, and only a known process can be killed. So a timeout or a
    # cancellation that comes during the start waits for it, then kills what it started;
    # the deadline counts from the request.
    starting = asyncio.ensure_future(start(stdin, stdout_write, stderr_write))
    outputs: list[_Output] = []
    try:
        async with asyncio.timeout(timeout_sec):
            try:
                await asyncio.shield(starting)
            finally:
                await asyncio.wait([starting])
                if stdin_fd is None:
                    os.close(stdin)
                if stdout_read is not None:
                    os.close(stdout_write)
                os.close(stderr_write)
                outputs = _outputs(starting, stdout_read, stderr_read, on_output)
            await starting.result().wait()
    except TimeoutError:
        await _end(starting.result(), outputs, kill)
        raise CommandTimedOut from None
    except BaseException:
        if starting.exception() is None:
            await asyncio.shield(_end(starting.result(), outputs, kill))
        raise
    process = starting.result()
    stdout = outputs[0] if stdout_read is not None else None
    stderr = outputs[-1]
    await _drain(outputs)
    return Completed(
        return_code=_shell_return_code(process.returncode),
        stdout="" if stdout is None else stdout.text(),
        stderr=stderr.text(),
    )


def _outputs(
    starting: asyncio.Future[Process],
    stdout_read: int | None,
    stderr_read: int,
    on_output: OutputCallback | None,
) -> list[_Output]:
    """Readers of the command's pipes once it started (stdout first, if collected), or
    the pipes closed if it did not."""
    if starting.cancelled() or starting.exception() is not None:
        for descriptor in (stdout_read, stderr_read):
            if descriptor is not None:
                os.close(descriptor)
        return []
    stderr = _Output(stderr_read, "stderr", on_output)
    return [stderr] if stdout_read is None else [_Output(stdout_read, "stdout", on_output), stderr]


class _Output:
    """One output pipe, read as it fills, closed once the command is over."""

    def __init__(self, descriptor: int, name: OutputStream, on_output: OutputCallback | None):
        self.chunks: list[bytes] = []
        self.name = name
        self.on_output = on_output
        self.pipe = os.fdopen(descriptor, "rb", buffering=0)
        self.task = asyncio.create_task(self._read())

    async def _read(self) -> None:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        try:
            transport, _ = await loop.connect_read_pipe(
                lambda: asyncio.StreamReaderProtocol(reader), self.pipe
            )
        except BaseException:
            self.pipe.close()
            raise
        try:
            while chunk := await reader.read(READ_CHUNK):
                self.chunks.append(chunk)
                if self.on_output is not None:
                    await self.on_output(chunk.decode(errors="replace"), self.name)
        finally:
            transport.close()

    def text(self) -> str:
        return b"".join(self.chunks).decode(errors="replace")


async def _end(
    process: Process, outputs: list[_Output], kill: Callable[[Process], Awaitable[None]]
) -> None:
    await kill(process)
    await process.wait()
    await _drain(outputs)


async def _drain(outputs: list[_Output]) -> None:
    _, pending = await asyncio.wait([output.task for output in outputs], timeout=OUTPUT_GRACE_SEC)
    for task in pending:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def _shell_return_code(return_code: int | None) -> int:
    """Report death by signal N as 128 + N, the way a shell (and Docker) does."""
    if return_code is None:
        return 128 + signal.SIGKILL
    return 128 - return_code if return_code < 0 else return_code
