"""Polls of one run's results that arrive together share one read of the database.

Fifty clients polling a run under way cost the gateway a key lookup, the run, the
document's fingerprint and the kept document each, fifty times a second, on a machine
whose CPU the run needs. Here a poll of a run that is being polled often (`hot_polls` in
the last second) waits up to `gather_sec` for others, and one hop to the thread pool
answers them all: each distinct key is checked, and the run and its document read, once.

Every answer is still read after its request arrived (a poll joins only a read that has
not started), so a change made before a poll, a revoked key included, is always in its
answer. A run polled less often is read at once, as before: a lone `synth run show` waits
for nothing.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from fastapi.concurrency import run_in_threadpool

Answers = dict[str | None, str | Exception]
"""Per key presented (None for none): the document's text, or the refusal to raise."""
Read = Callable[[list[str | None]], Answers]
"""One read of a run for the keys presented; runs on the thread pool."""

HOT_WINDOW_SEC = 1.0
TARGETS_KEPT = 1024
"""Polled runs whose recent polls are remembered: past this the memory starts over (the
runs read cold until they are hot again), so it never grows with the runs ever polled."""


@dataclass
class _Batch:
    done: asyncio.Future[Answers]
    presented: set[str | None] = field(default_factory=set)


class SharedReads:
    def __init__(self, gather_sec: float, hot_polls: int) -> None:
        self.gather_sec = gather_sec
        self.hot_polls = hot_polls
        self._open: dict[tuple[str, ...], _Batch] = {}
        self._polls: dict[tuple[str, ...], deque[float]] = {}
        self._reading: set[asyncio.Task[None]] = set()

    async def answer(self, target: tuple[str, ...], presented: str | None, read: Read) -> str:
        """The text for `presented` from a read of `target` started after this call; a
        refusal is raised. `read` is used only if no read of `target` is open to join."""
        hot = self._hot(target)
        batch = self._open.get(target)
        if batch is None:
            batch = self._open[target] = _Batch(asyncio.get_running_loop().create_future())
            wait = self.gather_sec if hot else 0.0
            # A task of its own, so that a poller that leaves does not strand the others.
            task = asyncio.create_task(self._read(target, batch, read, wait))
            self._reading.add(task)
            task.add_done_callback(self._reading.discard)
        batch.presented.add(presented)
        answer = (await asyncio.shield(batch.done))[presented]
        if isinstance(answer, Exception):
            raise answer
        return answer

    def _hot(self, target: tuple[str, ...]) -> bool:
        """Count this poll of `target`; whether it is one of `hot_polls` in the last second."""
        now = time.monotonic()
        if target not in self._polls and len(self._polls) >= TARGETS_KEPT:
            self._polls.clear()
        polls = self._polls.setdefault(target, deque())
        polls.append(now)
        while polls[0] < now - HOT_WINDOW_SEC:
            polls.popleft()
        return len(polls) >= self.hot_polls

    async def _read(self, target: tuple[str, ...], batch: _Batch, read: Read, wait: float) -> None:
        try:
            if wait:
                await asyncio.sleep(wait)
        finally:
            # From here on a poll starts a read of its own: this one may miss its changes.
            del self._open[target]
        try:
            batch.done.set_result(await run_in_threadpool(read, list(batch.presented)))
        except Exception as error:
            batch.done.set_exception(error)
