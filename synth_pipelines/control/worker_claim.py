"""A worker's side of its claim: the claimed attempt, the next local sequence number of
its progress, and the calls that write under the claim's fence."""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.exc import OperationalError

from synth_pipelines.contracts.run_spec import RunSpec
from synth_pipelines.contracts.worker_attempt import Heartbeat, WorkerAttempt
from synth_pipelines.control.worker_attempts import (
    StaleWorkerError,
    append_progress,
    complete_batch,
    end_attempt,
    renew_lease,
)

APPEND_TRIES = 3
"""A progress append lost in transit (the commit landed, its answer did not) is sent
again with its local sequence number, which lands it once."""


@dataclass
class WorkerClaim:
    engine: Engine
    attempt: WorkerAttempt
    lease_sec: float
    _numbers: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    appended: Counter[str] = field(default_factory=Counter)
    """Progress events sent under the claim, by kind: what the worker did, for its end."""
    _sent: int = 0
    _ended: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def append(self, kind: str, data: dict[str, Any]) -> int:
        """Append one progress event under the claim; its run event seq."""
        with self._lock:
            local_seq = next(self._numbers)
            self._sent += 1
            self.appended[kind] += 1
        tries = itertools.count(1)
        while True:
            try:
                return append_progress(self.engine, self.attempt, local_seq, kind, data)
            except OperationalError:
                tried = next(tries)
                if tried == APPEND_TRIES:
                    raise
                time.sleep(0.5 * tried)

    def complete(self, spec: RunSpec, summary: dict[str, Any]) -> bool:
        recorded = complete_batch(
            self.engine, self.attempt, spec, progress_seq=self._sent, summary=summary
        )
        self._ended = self._ended or recorded
        return recorded

    def heartbeat(self) -> Heartbeat:
        return renew_lease(self.engine, self.attempt, lease_sec=self.lease_sec)

    def end(self, status: str, reason: str) -> None:
        """End the claim short of completion, recording what it had done."""
        end_attempt(self.engine, self.attempt, status, reason, {"progress": dict(self.appended)})
        self._ended = True

    def release(self, status: str, reason: str) -> None:
        """End the claim if nothing ended it yet (a completion, a cancel), so the batch
        can be claimed again without waiting for the lease; a superseded claim is left."""
        if not self._ended:
            with contextlib.suppress(StaleWorkerError):
                self.end(status, reason)
