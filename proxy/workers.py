"""The proxy's worker processes, and how the server hands them calls.

Rendering and tokenizing hold the GIL, and so does the tinker SDK while it encodes a long
prompt, so every call's work (`proxy.worker_calls`) runs in a worker process and the server
process only speaks HTTP. Each worker runs an event loop: it renders one call while others
wait for the model, and answers each request as soon as it is done, in any order. A session
is always sent to the same worker, so its next turn finds the worker's cached prefix.

Requests (a type per call, `proxy.worker_messages`) and answers are length-prefixed pickles
on a socket pair, read and written by the event loops on both sides, so handing over a call
costs no thread switch. A worker never outlives the server, and a worker that dies fails its
calls instead of hanging them.
`processes=0` runs one worker on a thread of the server process, over the same socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import itertools
import logging
import multiprocessing
import pickle
import signal
import socket
import struct
import threading
import traceback
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from proxy import worker_calls
from proxy.worker_calls import WorkerConfig
from proxy.worker_messages import (
    Abandon,
    CallRecord,
    Cancel,
    Complete,
    Count,
    ErrorResult,
    Finished,
    Freeze,
    Prepare,
    Prepared,
    WorkerRequest,
)
from synth_pipelines.contracts.api_errors import ApiError
from synth_pipelines.rendering.model_registry import TinkerRoute
from synth_pipelines.rendering.prefix_cache import CacheScope

log = logging.getLogger("synth.proxy.workers")
PR_SET_PDEATHSIG = 1
_LENGTH = struct.Struct("!Q")


@dataclass(frozen=True)
class _Crash:
    """An unexpected exception inside a worker: a bug, reported as a server error."""

    exception: str
    """The exception's class name and message, for the server's log."""
    traceback: str


def _frame(message: object) -> bytes:
    payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return _LENGTH.pack(len(payload)) + payload


async def _read_frame(reader: asyncio.StreamReader) -> Any:
    (length,) = _LENGTH.unpack(await reader.readexactly(_LENGTH.size))
    return pickle.loads(await reader.readexactly(length))


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


def _own_tinker_loop() -> None:
    """The tinker SDK runs every request on one background thread per process, kept in a
    module-level singleton (tinker 0.38). A forked worker inherits the singleton but not
    its thread, and would wait forever on a loop nobody runs, whenever the server process
    had used the SDK before forking (a test process, an embedding application); so each
    worker starts with a singleton of its own."""
    from tinker.lib import internal_client_holder

    internal_client_holder._internal_client_holder_thread_singleton = (
        internal_client_holder.InternalClientHolderThreadSingleton()  # type: ignore[no-untyped-call]
    )


async def _answer_requests(sock: socket.socket) -> None:
    reader, writer = await asyncio.open_connection(sock=sock)
    running: set[asyncio.Task[None]] = set()

    async def answer(request_id: int, request: WorkerRequest) -> None:
        result: object
        try:
            result = await worker_calls.handle(request)
        except asyncio.CancelledError:
            return
        except Exception as error:
            log.exception("worker call %s failed", type(request).__name__)
            result = _Crash(f"{type(error).__name__}: {error}", traceback.format_exc(limit=3))
        writer.write(_frame((request_id, result)))

    try:
        while True:
            request_id, request = await _read_frame(reader)
            task = asyncio.create_task(answer(request_id, request))
            running.add(task)
            task.add_done_callback(running.discard)
    except (asyncio.IncompleteReadError, ConnectionError):
        return


def _serve(
    sock: socket.socket, config: WorkerConfig, inherited: list[socket.socket], own_process: bool
) -> None:
    """A worker's life: answer requests on `sock` until the server closes it."""
    if own_process:
        _die_with_parent()
        _own_tinker_loop()
        for other in inherited:
            other.close()
    worker_calls.init_worker(config)
    asyncio.run(_answer_requests(sock))
    worker_calls.close_worker()


@dataclass
class _Worker:
    index: int
    runner: multiprocessing.process.BaseProcess | threading.Thread
    writer: asyncio.StreamWriter | None = None
    reading: asyncio.Task[None] | None = None
    waiting: dict[int, asyncio.Future[object]] = field(default_factory=dict)
    alive: bool = True

    async def connect(self, sock: socket.socket) -> None:
        reader, self.writer = await asyncio.open_connection(sock=sock)
        self.reading = asyncio.create_task(self._read_answers(reader))

    async def _read_answers(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                request_id, result = await _read_frame(reader)
                self._resolve(request_id, result)
        except (asyncio.IncompleteReadError, ConnectionError):
            self._died()

    def _resolve(self, request_id: int, result: object) -> None:
        future = self.waiting.pop(request_id, None)
        if future is None or future.done():
            return
        if isinstance(result, _Crash):
            log.error(
                "proxy worker %d failed: %s\n%s", self.index, result.exception, result.traceback
            )
            future.set_exception(
                ApiError("api_error", f"internal error in proxy worker {self.index}")
            )
        else:
            future.set_result(result)

    def _died(self) -> None:
        self.alive = False
        for future in self.waiting.values():
            if not future.done():
                future.set_exception(
                    ApiError(
                        "api_error", f"proxy worker {self.index} exited during the call; retry it"
                    )
                )
        self.waiting.clear()

    def send(self, message: object) -> None:
        if not self.alive or self.writer is None:
            raise ApiError("api_error", f"proxy worker {self.index} has exited; restart the proxy")
        self.writer.write(_frame(message))


class CallWorkers:
    """`processes` worker processes with session affinity (0: one worker on a thread)."""

    remembered_sessions = 4096
    """Sessions whose worker is remembered; past that, the longest idle is forgotten (its
    next call may land on another worker and re-tokenize its prompt once)."""

    def __init__(self, config: WorkerConfig, processes: int):
        self.config = config
        self.processes = processes
        self._workers: list[_Worker] = []
        self._ids = itertools.count()
        self._sessions: OrderedDict[CacheScope, int] = OrderedDict()

    async def start(self) -> None:
        pairs = [socket.socketpair() for _ in range(max(1, self.processes))]
        servers = [server for server, _ in pairs]
        for index, (_, worker) in enumerate(pairs):
            runner: multiprocessing.process.BaseProcess | threading.Thread
            if self.processes > 0:
                # Every end but its own is closed in the worker: were another worker to
                # hold this one's end, the server would never see this one die.
                others = [end for pair in pairs for end in pair if end is not worker]
                runner = multiprocessing.get_context("fork").Process(
                    target=_serve,
                    args=(worker, self.config, others, True),
                    name=f"proxy-worker-{index}",
                    daemon=True,
                )
            else:
                runner = threading.Thread(
                    target=_serve, args=(worker, self.config, [], False), daemon=True
                )
            self._workers.append(_Worker(index, runner))
        for entry in self._workers:
            entry.runner.start()
        if self.processes > 0:
            # Only the worker holds its end, so the server sees the socket close if it dies.
            for _, worker in pairs:
                worker.close()
        for entry, server in zip(self._workers, servers, strict=True):
            await entry.connect(server)

    def choose(self, scope: CacheScope | None) -> int:
        """The worker for a call: a session's first call goes to the least busy worker, and
        its later calls follow it there, to its cached prefix."""
        if scope is not None and scope in self._sessions:
            self._sessions.move_to_end(scope)
            return self._sessions[scope]
        worker = min(range(len(self._workers)), key=lambda i: len(self._workers[i].waiting))
        if scope is not None:
            self._sessions[scope] = worker
            if len(self._sessions) > self.remembered_sessions:
                self._sessions.popitem(last=False)
        return worker

    async def prepare(
        self, worker: int, call_id: str, body: bytes, scope: CacheScope | None
    ) -> Prepared | ErrorResult:
        """Validate and render a Messages request; the worker keeps its prompt for `complete`."""
        answer = await self._ask(worker, Prepare(call_id, body, scope))
        assert isinstance(answer, Prepared | ErrorResult), answer
        return answer

    async def complete(
        self, worker: int, call_id: str, route: TinkerRoute, record: CallRecord
    ) -> Finished | ErrorResult:
        """Sample, parse and stage a call `prepare`d on the same worker."""
        answer = await self._ask(worker, Complete(call_id, route, record))
        assert isinstance(answer, Finished | ErrorResult), answer
        return answer

    def cancel(self, worker: int, call_id: str) -> None:
        """Stop a call still sampling: its client is gone."""
        self._tell(worker, Cancel(call_id))

    def abandon(self, worker: int, call_id: str) -> None:
        """Forget a prepared call that will not be completed."""
        self._tell(worker, Abandon(call_id))

    async def count(self, worker: int, body: bytes) -> int | ErrorResult:
        """The input tokens of a count_tokens request."""
        answer = await self._ask(worker, Count(body))
        assert isinstance(answer, int | ErrorResult), answer
        return answer

    async def freeze(self) -> None:
        await asyncio.gather(*(self._ask(i, Freeze()) for i in range(len(self._workers))))

    async def _ask(self, worker: int, request: WorkerRequest) -> object:
        entry = self._workers[worker]
        request_id = next(self._ids)
        future = asyncio.get_running_loop().create_future()
        entry.waiting[request_id] = future
        try:
            entry.send((request_id, request))
            return await future
        finally:
            entry.waiting.pop(request_id, None)

    def _tell(self, worker: int, request: WorkerRequest) -> None:
        """Send a request whose answer nobody waits for (none if the worker is gone)."""
        entry = self._workers[worker]
        if entry.alive:
            entry.send((next(self._ids), request))

    async def shutdown(self) -> None:
        """Stop the workers (the server has finished its calls by now): each sees its socket
        close, ends its sampling session and exits; a process that does not is terminated."""
        for entry in self._workers:
            if entry.writer is not None:
                entry.writer.close()
        # A transport closes its socket on the loop's next turn: wait for it, or every
        # worker would wait out the join below before it saw its socket close.
        for entry in self._workers:
            if entry.writer is not None:
                with contextlib.suppress(OSError):
                    await entry.writer.wait_closed()
        await asyncio.to_thread(self._join)

    def _join(self) -> None:
        for entry in self._workers:
            entry.runner.join(timeout=5)
            if isinstance(entry.runner, multiprocessing.process.BaseProcess) and (
                entry.runner.is_alive()
            ):
                entry.runner.terminate()
                entry.runner.join(timeout=5)
