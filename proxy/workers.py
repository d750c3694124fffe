"""The proxy's worker processes, and how the server hands them calls.

Rendering and tokenizing hold the GIL, and so does the tinker SDK while it encodes a long
prompt, so every call's work (`proxy.worker_calls`) runs in a worker process and the server
process only speaks HTTP. Each worker runs an event loop: it renders one call while others
wait for the model, and answers each request as soon as it is done, in any order. A session
is always sent to the same worker, so its next turn finds the worker's cached prefix.

Requests and answers are pickled over one pipe per worker. On the server side a thread per
worker writes requests (a long body never blocks the event loop) and one reads answers. A
worker never outlives the server, and a worker that dies fails its calls instead of hanging
them. `processes=0` runs one worker on a thread of the server process, with the same pipe.
"""

from __future__ import annotations

import asyncio
import ctypes
import inspect
import itertools
import logging
import multiprocessing
import queue
import signal
import threading
import traceback
import zlib
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from proxy import worker_calls
from proxy.errors import ProxyError
from proxy.prefix_cache import CacheScope
from proxy.worker_calls import WorkerConfig

log = logging.getLogger("synth.proxy.workers")
PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class _Crash:
    """An unexpected exception inside a worker: a bug, reported as a server error."""

    description: str


def _die_with_parent() -> None:
    """A worker process never outlives the proxy that started it, however that proxy ends.

    Forked workers inherit the server's signal handlers, which would make them ignore a
    SIGTERM sent to the process group; they get the default back, and Ctrl-C is left to
    the parent, which shuts the workers down.
    """
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _serve(
    connection: Connection, config: WorkerConfig, inherited: list[Connection], own_process: bool
) -> None:
    """A worker's life: answer requests from `connection` until the server closes it."""
    if own_process:
        _die_with_parent()
        for other in inherited:
            other.close()
    worker_calls.init_worker(config)
    loop = asyncio.new_event_loop()

    async def answer(request_id: int, name: str, args: tuple) -> None:
        try:
            result = worker_calls.HANDLERS[name](*args)
            if inspect.isawaitable(result):
                result = await result
        except asyncio.CancelledError:
            return
        except Exception:
            log.exception("worker call %s failed", name)
            result = _Crash(traceback.format_exc(limit=3))
        connection.send((request_id, result))

    def read() -> None:
        try:
            while True:
                request_id, name, args = connection.recv()
                loop.call_soon_threadsafe(loop.create_task, answer(request_id, name, args))
        except (EOFError, OSError):
            loop.call_soon_threadsafe(loop.stop)

    threading.Thread(target=read, name="worker-requests", daemon=True).start()
    loop.run_forever()


@dataclass
class _Worker:
    index: int
    connection: Connection
    runner: multiprocessing.process.BaseProcess | threading.Thread
    loop: asyncio.AbstractEventLoop
    outbox: queue.SimpleQueue = field(default_factory=queue.SimpleQueue)
    waiting: dict[int, asyncio.Future] = field(default_factory=dict)
    alive: bool = True

    def start_io(self) -> None:
        threading.Thread(target=self._write, name=f"worker-{self.index}-out", daemon=True).start()
        threading.Thread(target=self._read, name=f"worker-{self.index}-in", daemon=True).start()

    def _write(self) -> None:
        while (request := self.outbox.get()) is not None:
            try:
                self.connection.send(request)
            except OSError:
                return

    def _read(self) -> None:
        try:
            while True:
                request_id, result = self.connection.recv()
                self.loop.call_soon_threadsafe(self._resolve, request_id, result)
        except (EOFError, OSError):
            if not self.loop.is_closed():
                self.loop.call_soon_threadsafe(self._died)

    def _resolve(self, request_id: int, result: Any) -> None:
        future = self.waiting.pop(request_id, None)
        if future is None or future.done():
            return
        if isinstance(result, _Crash):
            future.set_exception(
                ProxyError("api_error", f"internal error in proxy worker {self.index}")
            )
            log.error("proxy worker %d failed:\n%s", self.index, result.description)
        else:
            future.set_result(result)

    def _died(self) -> None:
        self.alive = False
        for future in self.waiting.values():
            if not future.done():
                future.set_exception(
                    ProxyError(
                        "api_error",
                        f"proxy worker {self.index} exited during the call; retry it",
                    )
                )
        self.waiting.clear()


class CallWorkers:
    """`processes` worker processes with session affinity (0: one worker on a thread)."""

    def __init__(self, config: WorkerConfig, processes: int):
        self.config = config
        self.processes = processes
        self._workers: list[_Worker] = []
        self._ids = itertools.count()
        self._next = itertools.cycle(range(max(1, processes)))

    def start(self) -> None:
        """Start the workers; call from the event loop that will await their answers."""
        loop = asyncio.get_running_loop()
        pipes = [multiprocessing.Pipe() for _ in range(max(1, self.processes))]
        servers = [server for server, _ in pipes]
        for index, (server, worker) in enumerate(pipes):
            runner: multiprocessing.process.BaseProcess | threading.Thread
            if self.processes > 0:
                runner = multiprocessing.get_context("fork").Process(
                    target=_serve,
                    args=(worker, self.config, servers, True),
                    name=f"proxy-worker-{index}",
                    daemon=True,
                )
            else:
                runner = threading.Thread(
                    target=_serve, args=(worker, self.config, [], False), daemon=True
                )
            self._workers.append(_Worker(index, server, runner, loop))
        # Every process is forked before any thread of this one starts.
        for entry in self._workers:
            entry.runner.start()
        if self.processes > 0:
            # Only the worker holds its end, so the server sees the pipe close when it dies.
            for _, worker in pipes:
                worker.close()
        for entry in self._workers:
            entry.start_io()

    def choose(self, scope: CacheScope | None) -> int:
        if scope is None:
            return next(self._next)
        key = "\0".join((scope.owner, scope.credential, scope.model, scope.session, scope.agent))
        return zlib.crc32(key.encode()) % len(self._workers)

    async def call(self, worker: int, function: str, *args: Any) -> Any:
        entry = self._workers[worker]
        if not entry.alive:
            raise ProxyError("api_error", f"proxy worker {worker} has exited; restart the proxy")
        request_id = next(self._ids)
        future = entry.loop.create_future()
        entry.waiting[request_id] = future
        entry.outbox.put((request_id, function, args))
        try:
            return await future
        finally:
            entry.waiting.pop(request_id, None)

    def tell(self, worker: int, function: str, *args: Any) -> None:
        """Send a request whose answer nobody waits for."""
        self._workers[worker].outbox.put((next(self._ids), function, args))

    async def warm(self, models: list[str]) -> None:
        await asyncio.gather(*(self.call(i, "warm", models) for i in range(len(self._workers))))

    def shutdown(self) -> None:
        """Stop the workers; the server has finished its calls by now."""
        for entry in self._workers:
            entry.outbox.put(None)
        for entry in self._workers:
            if isinstance(entry.runner, threading.Thread):
                # The worker thread sees its pipe close and stops its loop.
                entry.connection.close()
            else:
                entry.runner.terminate()
            entry.runner.join(timeout=5)
