"""Results of submitted operations, held until the client's `retrieve_future` poll collects them."""

from __future__ import annotations

import asyncio
import uuid
from collections import OrderedDict
from concurrent.futures import Future
from typing import Any

from synth_pipelines.tinker_local.outcomes import Outcome

REMEMBERED_SUBMISSIONS = 4096


class PendingResults:
    def __init__(self) -> None:
        self._futures: dict[str, Future[Outcome]] = {}
        self._submissions: OrderedDict[str, dict[str, Any]] = OrderedDict()

    def open(self) -> tuple[str, Future[Outcome]]:
        """A new request id and the future its operation will complete."""
        request_id = f"req-{uuid.uuid4().hex}"
        future: Future[Outcome] = Future()
        self._futures[request_id] = future
        return request_id, future

    async def wait(self, request_id: str, timeout: float) -> Outcome | None:
        """The outcome, or None if it is not ready within `timeout` seconds.

        Raises KeyError for a request id the service does not know (or has delivered).
        """
        future = self._futures[request_id]
        if not future.done():
            await asyncio.wait([asyncio.wrap_future(future)], timeout=timeout)
        if not future.done():
            return None
        del self._futures[request_id]
        return future.result()

    def submitted(self, idempotency_key: str | None) -> dict[str, Any] | None:
        """The answer already given to a submission retried with the same idempotency key."""
        if idempotency_key is None:
            return None
        return self._submissions.get(idempotency_key)

    def remember(self, idempotency_key: str | None, answer: dict[str, Any]) -> None:
        if idempotency_key is None:
            return
        self._submissions[idempotency_key] = answer
        while len(self._submissions) > REMEMBERED_SUBMISSIONS:
            self._submissions.popitem(last=False)
