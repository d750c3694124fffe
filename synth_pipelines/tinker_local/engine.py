"""The one thread that touches the model.

All computation runs here, one operation at a time, so adapters can be attached to
the shared backbone without locks and torch keeps every core for a single op.
Exclusive operations (training, saves, loads) run in submission order; sample jobs
wait in their own queue and those sharing the same weights are decoded as one batch,
which takes in jobs for the same weights that arrive while it runs (unless an exclusive
operation waits) and answers each job as soon as its rows are done. Between two
exclusive operations at most one sampling batch runs, and vice versa.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass

from synth_pipelines.tinker_local.errors import UserError
from synth_pipelines.tinker_local.lora import Adapter, LoraSlots
from synth_pipelines.tinker_local.outcomes import Failure, Outcome
from synth_pipelines.tinker_local.sampling import MAX_ROWS, SampleJob, SampleOutput, Sampler

logger = logging.getLogger(__name__)


@dataclass
class _Exclusive:
    work: Callable[[], Outcome]
    future: Future[Outcome]


@dataclass
class _Sampling:
    adapter: Adapter | None
    job: SampleJob
    finish: Callable[[SampleOutput], Outcome]
    future: Future[Outcome]


class Engine:
    def __init__(self, slots: LoraSlots, sampler: Sampler):
        self.slots = slots
        self.sampler = sampler
        self._exclusive: deque[_Exclusive] = deque()
        self._sampling: deque[_Sampling] = deque()
        self._wake = threading.Condition()
        self._stopping = False
        self._thread = threading.Thread(target=self._loop, name="tinker-local-engine", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        with self._wake:
            self._stopping = True
            self._wake.notify()
        self._thread.join()

    def run(self, work: Callable[[], Outcome], future: Future[Outcome]) -> None:
        """Queue an exclusive operation; its outcome completes `future`."""
        with self._wake:
            self._exclusive.append(_Exclusive(work, future))
            self._wake.notify()

    def sample(
        self,
        adapter: Adapter | None,
        job: SampleJob,
        finish: Callable[[SampleOutput], Outcome],
        future: Future[Outcome],
    ) -> None:
        """Queue a sample job; `finish` turns its output into the outcome of `future`."""
        with self._wake:
            self._sampling.append(_Sampling(adapter, job, finish, future))
            self._wake.notify()

    def _loop(self) -> None:
        while True:
            with self._wake:
                while not (self._exclusive or self._sampling or self._stopping):
                    self._wake.wait()
                if self._stopping:
                    self._fail_pending()
                    return
                exclusive = self._exclusive.popleft() if self._exclusive else None
                batch = self._take_batch()
            if exclusive is not None:
                exclusive.future.set_result(_guarded(exclusive.work))
            if batch:
                self._run_batch(batch)

    def _take_batch(self) -> list[_Sampling]:
        """The oldest waiting job and every later one that samples from the same weights."""
        if not self._sampling:
            return []
        weights = self._sampling[0].adapter
        batch: list[_Sampling] = []
        rest: deque[_Sampling] = deque()
        rows = 0
        for item in self._sampling:
            fits = rows + item.job.num_samples <= MAX_ROWS or not batch
            if item.adapter is weights and fits:
                batch.append(item)
                rows += item.job.num_samples
            else:
                rest.append(item)
        self._sampling = rest
        return batch

    def _run_batch(self, batch: Sequence[_Sampling]) -> None:
        weights = batch[0].adapter
        taken = list(batch)
        answered: set[int] = set()

        def done(index: int, output: SampleOutput) -> None:
            answered.add(index)
            item = taken[index]
            item.future.set_result(_guarded(functools.partial(item.finish, output)))

        def admit(room: int) -> list[SampleJob]:
            joining = self._take_joining(weights, room)
            taken.extend(joining)
            return [item.job for item in joining]

        try:
            self.slots.attach(weights)
            self.sampler.serve([item.job for item in batch], done, admit)
        except Exception as error:
            failure = _failure(error)
            for index, item in enumerate(taken):
                if index not in answered:
                    item.future.set_result(failure)

    def _take_joining(self, weights: Adapter | None, room: int) -> list[_Sampling]:
        """Waiting jobs that may join the running batch: for its weights, free (not
        forced), within `room` samples; none while an exclusive operation waits."""
        with self._wake:
            if self._exclusive or self._stopping:
                return []
            joining: list[_Sampling] = []
            rest: deque[_Sampling] = deque()
            for item in self._sampling:
                fits = item.job.num_samples <= room
                if item.adapter is weights and item.job.forced is None and fits:
                    joining.append(item)
                    room -= item.job.num_samples
                else:
                    rest.append(item)
            self._sampling = rest
            return joining

    def _fail_pending(self) -> None:
        failure = Failure("the model service is shutting down; retry against a new one", "server")
        pending: list[_Exclusive | _Sampling] = [*self._exclusive, *self._sampling]
        for item in pending:
            item.future.set_result(failure)
        self._exclusive.clear()
        self._sampling.clear()


def _guarded(work: Callable[[], Outcome]) -> Outcome:
    try:
        return work()
    except Exception as error:
        return _failure(error)


def _failure(error: Exception) -> Failure:
    if isinstance(error, UserError):
        return Failure(str(error), "user")
    logger.exception("operation failed inside the model service")
    return Failure(
        f"internal error in the model service: {type(error).__name__}: {error}", "server"
    )
