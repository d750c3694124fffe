"""A run worker's hold on its claimed batch while the batch runs: heartbeats that renew
the lease, and the stop they bring when the run is cancelled or the claim superseded."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Awaitable
from typing import get_args

from synth_pipelines.config import Settings
from synth_pipelines.contracts.plan import HARBOR_PROVIDERS
from synth_pipelines.contracts.profile import Engine
from synth_pipelines.contracts.worker_attempt import Heartbeat, WorkerAdvertisement
from synth_pipelines.control.worker_claim import WorkerClaim

log = logging.getLogger(__name__)


def advertisement(deployment: Settings, launched_as: str) -> WorkerAdvertisement:
    """What this run worker can run, under an identity naming its host, its process and
    the launch (`launched_as`, e.g. the Dagster run) that started it."""
    return WorkerAdvertisement(
        worker=f"run-worker {socket.gethostname()} pid {os.getpid()} {launched_as}"[:200],
        engines=deployment.worker_engines or get_args(Engine),
        providers=deployment.worker_providers or ("local", *HARBOR_PROVIDERS),
        judges=deployment.worker_judges,
    )


class BatchStoppedError(RuntimeError):
    """The batch's work was stopped by a heartbeat's reply: the run was cancelled, or the
    claim was superseded."""

    def __init__(self, reply: Heartbeat) -> None:
        super().__init__(f"{reply.action}: {reply.reason}")
        self.reply = reply


class HeldBatch:
    """Beats every third of the lease while the batch's work runs; `guard` runs a piece
    of that work and stops it (cancelling its tasks, so their sandboxes and model
    tokens are released) when a reply says `cancel` or `superseded`.

    A beat that fails to reach the database is tried again on the next one: the lease
    outlives two missed beats."""

    def __init__(self, claim: WorkerClaim) -> None:
        self.claim = claim
        self.stopped: Heartbeat | None = None
        self._stop = asyncio.Event()
        self._beats: asyncio.Task[None] | None = None

    async def __aenter__(self) -> HeldBatch:
        self._beats = asyncio.create_task(self._beat())
        return self

    async def __aexit__(self, *_exc: object) -> None:
        assert self._beats is not None
        self._beats.cancel()
        await asyncio.gather(self._beats, return_exceptions=True)

    async def _beat(self) -> None:
        while True:
            await asyncio.sleep(self.claim.lease_sec / 3)
            try:
                reply = await asyncio.to_thread(self.claim.heartbeat)
            except Exception as error:  # the database unreachable for a beat
                log.warning("heartbeat of %s failed: %s", self.claim.attempt.batch, error)
                continue
            if reply.action != "continue":
                self.stopped = reply
                self._stop.set()
                return

    async def guard[T](self, work: Awaitable[T]) -> T:
        """`work`'s result, or BatchStoppedError once a heartbeat says stop."""
        if self.stopped is not None:
            raise BatchStoppedError(self.stopped)
        task = asyncio.ensure_future(work)
        stop = asyncio.create_task(self._stop.wait())
        try:
            await asyncio.wait((task, stop), return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            if not task.done():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        if task.cancelled() and self.stopped is not None:
            raise BatchStoppedError(self.stopped)
        return task.result()
