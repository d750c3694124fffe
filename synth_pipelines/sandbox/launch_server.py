"""The controller's side of a sandbox's launch server (`launcher.py`): one interpreter per
sandbox that forks a launcher process for every command.

Requests go out on a SOCK_SEQPACKET socket, one message each with its descriptors; the
server's replies (STARTED with the launcher's pid, EXITED with its exit code) are read on
the event loop as they arrive and settle each command's futures, so many commands of one
sandbox run at once and nothing blocks the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import marshal
import os
import socket
import sys
from dataclasses import dataclass, field
from pathlib import Path

from synth_pipelines.sandbox import launcher
from synth_pipelines.sandbox.errors import SandboxStartError

LAUNCHER = Path(launcher.__file__).resolve()
CLOSE_DEADLINE_SEC = 10.0


class LaunchServerGoneError(SandboxStartError):
    """The sandbox's launch server ended before a command's outcome came back."""


@dataclass
class LaunchedCommand:
    """One command's launcher process, as `commands.run_to_completion` follows it."""

    pid: int
    exited: asyncio.Future[int]

    @property
    def returncode(self) -> int | None:
        if self.exited.done() and not self.exited.exception():
            return self.exited.result()
        return None

    async def wait(self) -> int:
        return await asyncio.shield(self.exited)


@dataclass
class _Pending:
    started: asyncio.Future[int]
    exited: asyncio.Future[int]


@dataclass
class LaunchServer:
    process: asyncio.subprocess.Process
    channel: socket.socket
    loop: asyncio.AbstractEventLoop
    pending: dict[int, _Pending] = field(default_factory=dict)
    numbers: itertools.count[int] = field(default_factory=itertools.count)

    @classmethod
    async def start(cls, pidfd: int, root_fd: int) -> LaunchServer:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        setup = {"pidfd": pidfd, "root_fd": root_fd, "socket": theirs.fileno()}
        try:
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-I",
                "-S",
                str(LAUNCHER),
                marshal.dumps(setup).hex(),
                env={},
                stdin=asyncio.subprocess.DEVNULL,
                start_new_session=True,
                pass_fds=(pidfd, root_fd, theirs.fileno()),
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        ours.setblocking(False)
        server = cls(process=process, channel=ours, loop=asyncio.get_running_loop())
        server.loop.add_reader(ours.fileno(), server._read_replies)
        return server

    async def launch(
        self, spec: dict[str, object], stdin: int, stdout: int, stderr: int
    ) -> LaunchedCommand:
        """Start one command (`launcher.py` describes `spec`); returns once its launcher
        process exists."""
        if self.channel.fileno() < 0:
            raise LaunchServerGoneError("the sandbox's launch server is closed")
        self._bind(asyncio.get_running_loop())
        number = next(self.numbers)
        pending = _Pending(self.loop.create_future(), self.loop.create_future())
        self.pending[number] = pending
        described = os.memfd_create("sandbox-command", os.MFD_CLOEXEC)
        try:
            os.write(described, marshal.dumps(spec))
            os.lseek(described, 0, os.SEEK_SET)
            await self._send(launcher.REQUEST.pack(number), [described, stdin, stdout, stderr])
        except BaseException:
            self.pending.pop(number, None)
            raise
        finally:
            os.close(described)
        # Not to be abandoned once sent: `commands.run_to_completion` awaits the start to
        # its end, whatever interrupts it, so that what it started can be killed.
        return LaunchedCommand(pid=await pending.started, exited=pending.exited)

    def _bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """Read replies on `loop`: a sandbox started under one event loop may take its
        commands from another once the first has finished (nothing is pending then)."""
        if loop is self.loop:
            return
        if not self.loop.is_closed():
            self.loop.remove_reader(self.channel.fileno())
        self.loop = loop
        loop.add_reader(self.channel.fileno(), self._read_replies)

    async def _send(self, message: bytes, descriptors: list[int]) -> None:
        while True:
            try:
                socket.send_fds(self.channel, [message], descriptors)
                return
            except BlockingIOError:
                writable = self.loop.create_future()
                self.loop.add_writer(self.channel.fileno(), writable.set_result, None)
                try:
                    await writable
                finally:
                    self.loop.remove_writer(self.channel.fileno())
            except OSError as error:
                raise LaunchServerGoneError(
                    f"the sandbox's launch server is gone: {error.strerror}"
                ) from error

    def _read_replies(self) -> None:
        while True:
            try:
                reply = self.channel.recv(launcher.REPLY.size)
            except BlockingIOError:
                return
            except OSError:
                reply = b""
            if not reply:
                self._gone()
                return
            number, kind, value = launcher.REPLY.unpack(reply)
            pending = self.pending[number]
            if kind == launcher.STARTED:
                pending.started.set_result(value)
            else:
                del self.pending[number]
                pending.exited.set_result(value)

    def _gone(self) -> None:
        if not self.loop.is_closed():
            self.loop.remove_reader(self.channel.fileno())
        for pending in self.pending.values():
            for future in (pending.started, pending.exited):
                if not future.done():
                    future.set_exception(LaunchServerGoneError("the sandbox's launch server ended"))
        self.pending.clear()

    async def close(self) -> None:
        """End the server (it exits once its socket closes); commands still running
        carry on in their own launcher processes until the sandbox's init ends them."""
        if self.channel.fileno() >= 0:
            self._gone()
            self.channel.close()
        try:
            async with asyncio.timeout(CLOSE_DEADLINE_SEC):
                await self.process.wait()
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()
            await self.process.wait()
