"""The proxy's worker processes: calls reach them, and a dead worker fails calls at once."""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import signal
import time
from pathlib import Path

import pytest

from proxy.worker_calls import WorkerConfig
from proxy.worker_messages import ErrorResult
from proxy.workers import CallWorkers
from synth_pipelines.contracts.api_errors import ApiError
from synth_pipelines.rendering.model_registry import ModelRegistry

MODEL = "synth/qwen3-tiny"
BODY = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}).encode()


def _workers(tmp_path: Path, processes: int) -> CallWorkers:
    config = WorkerConfig(
        registry_json=ModelRegistry().to_json(),
        database_url=f"sqlite:///{tmp_path / 'control.db'}",
        spool_dir=tmp_path / "spool",
        model_service_url="http://127.0.0.1:9",
        model_service_key="tml-unused",
        backend_timeout_sec=5.0,
    )
    return CallWorkers(config, processes)


@pytest.mark.parametrize("processes", [0, 2])
def test_every_worker_answers_and_a_client_mistake_comes_back_as_an_error(
    tmp_path: Path, processes: int
):
    async def scenario() -> list:
        workers = _workers(tmp_path, processes)
        await workers.start()
        try:
            return [
                await workers.count(worker, body)
                for worker in range(max(1, processes))
                for body in (BODY, b"{not json")
            ]
        finally:
            await workers.shutdown()

    answers = asyncio.run(scenario())

    assert answers[0::2] == [answers[0]] * max(1, processes) and answers[0] > 0
    assert all(isinstance(answer, ErrorResult) for answer in answers[1::2])
    assert "not valid JSON" in answers[1].message


def test_a_worker_that_dies_fails_its_calls_instead_of_hanging(tmp_path: Path):
    async def scenario() -> None:
        workers = _workers(tmp_path, 1)
        await workers.start()
        try:
            (worker,) = multiprocessing.active_children()
            os.kill(worker.pid, signal.SIGKILL)
            with pytest.raises(ApiError, match="proxy worker 0") as caught:
                await asyncio.wait_for(workers.count(0, BODY), timeout=30)
            assert caught.value.error_type == "api_error"
        finally:
            await workers.shutdown()

    asyncio.run(scenario())


def test_idle_workers_exit_as_soon_as_the_server_closes_their_sockets(tmp_path: Path):
    """Each worker exits when it sees its socket close; waiting out the join's limit for
    every worker (5 s each) would slow every stop of the proxy."""

    async def scenario() -> float:
        workers = _workers(tmp_path, 2)
        await workers.start()
        started = time.monotonic()
        await workers.shutdown()
        return time.monotonic() - started

    assert asyncio.run(scenario()) < 5
    assert multiprocessing.active_children() == []
