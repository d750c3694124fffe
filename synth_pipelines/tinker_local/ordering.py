"""One model's operations, released in `seq_id` order whatever order they arrive in.

The SDK numbers a training client's requests and may send chunks of one
forward_backward concurrently, so a later chunk can arrive first; it waits here
until every earlier seq_id has been released.
"""

from __future__ import annotations

from collections.abc import Callable

from synth_pipelines.tinker_local.errors import UserError

FIRST_SEQ_ID = 1


class SequencedQueue:
    def __init__(self, model_id: str):
        self.model_id = model_id
        self._next = FIRST_SEQ_ID
        self._waiting: dict[int, Callable[[], None]] = {}

    def submit(self, seq_id: int | None, release: Callable[[], None]) -> None:
        """Call `release` once every operation before `seq_id` has been released."""
        if seq_id is None:
            release()
            return
        if seq_id < self._next or seq_id in self._waiting:
            raise UserError(
                f"seq_id {seq_id} was already used for model {self.model_id}; each request "
                "of a training client needs a new one"
            )
        self._waiting[seq_id] = release
        while self._next in self._waiting:
            self._waiting.pop(self._next)()
            self._next += 1
