"""The one network route a sandbox may have: a port on its own loopback that reaches
exactly one address on the host (the capture proxy's listener for sandboxes, a Unix
socket; or a TCP address).

The listening socket is created by a short-lived thread that has joined the sandbox's
network namespace, so it exists only inside the sandbox; connections accepted on it are
relayed by the host's event loop to the single target. No helper process runs inside
the sandbox, and nothing else on the host becomes reachable.

A route relays at most `MAX_CONNECTIONS` connections at once; one more is closed as soon
as it is accepted, before anything is relayed. Each relayed connection is one on the
target's listener, which every sandbox's route shares: before, a sandbox could hold as
many as it opened (400 half-open ones, all held). How long a connection that never sends
a whole request may last is the target's to decide (the capture proxy closes it after its
head timeout, `proxy/listener_limits.py`, and the route closes its side with it): the
route relays bytes, whatever protocol they carry.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import threading
from pathlib import Path

CHUNK = 65536
MAX_CONNECTIONS = 32
"""A harness holds a few calls in flight (the proxy refuses a token's ninth, see
`contracts/sampling_limits.py`) and a kept-alive connection or two; the capture proxy's
listener for sandboxes holds 512 in all."""


def _listen_inside(namespace_fd: int, port: int) -> socket.socket:
    created: list[socket.socket] = []
    failed: list[BaseException] = []

    def create() -> None:
        try:
            os.setns(namespace_fd, os.CLONE_NEWNET)
            listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(("127.0.0.1", port))
            listener.listen(128)
            listener.setblocking(False)
            created.append(listener)
        except BaseException as error:
            failed.append(error)

    # The thread that joined the namespace ends here, so no thread of ours stays in it.
    thread = threading.Thread(target=create, name="sandbox-route", daemon=True)
    thread.start()
    thread.join()
    if failed:
        raise failed[0]
    return created[0]


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()


RouteTarget = Path | tuple[str, int]
"""A Unix socket, or a (host, port) on the host."""


class SandboxRoute:
    def __init__(
        self,
        namespace_fd: int,
        inside_port: int,
        target: RouteTarget,
        max_connections: int = MAX_CONNECTIONS,
    ):
        """`namespace_fd`: the sandbox's network namespace, or a pidfd of a process in it."""
        self.namespace_fd = namespace_fd
        self.inside_port = inside_port
        self.target = target
        self.max_connections = max_connections
        self._server: asyncio.Server | None = None
        self._relays: set[asyncio.Task[None]] = set()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.inside_port}"

    async def open(self) -> None:
        listener = await asyncio.to_thread(_listen_inside, self.namespace_fd, self.inside_port)
        self._server = await asyncio.start_server(self._relay, sock=listener)

    async def _relay(
        self, inside_reader: asyncio.StreamReader, inside_writer: asyncio.StreamWriter
    ) -> None:
        if len(self._relays) >= self.max_connections:
            inside_writer.close()
            return
        task = asyncio.current_task()
        assert task is not None  # the server runs each connection in a task of its own
        self._relays.add(task)
        try:
            try:
                if isinstance(self.target, Path):
                    host_reader, host_writer = await asyncio.open_unix_connection(self.target)
                else:
                    host_reader, host_writer = await asyncio.open_connection(*self.target)
            except OSError:
                inside_writer.close()
                return
            await asyncio.gather(
                _pump(inside_reader, host_writer), _pump(host_reader, inside_writer)
            )
        finally:
            self._relays.discard(task)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            for task in list(self._relays):
                task.cancel()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
            self._server = None
