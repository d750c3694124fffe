"""`synth gateway serve` in its own process, and its memory watched while bulk bytes pass
by it: what the tests of upload and read grants measure."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import psutil
import pytest

from gateway.server import gateway_config
from synth_pipelines.config import Settings
from synth_pipelines.control.database import control_engine, create_tables
from synth_pipelines.services.embedded import gateway_service
from synth_pipelines.services.operator_key import ensure_operator_key
from synth_pipelines.services.supervisor import start, stop
from tests.conftest import PROJECT_ROOT
from tests.production_services import free_port


@contextmanager
def gateway_process(monkeypatch: pytest.MonkeyPatch) -> Iterator[psutil.Process]:
    """`synth gateway serve` as `synth up` starts it, with the CLI pointed at it."""
    monkeypatch.setenv("SYNTH_GATEWAY_URL", f"http://127.0.0.1:{free_port()}")
    settings = Settings()
    engine = control_engine(settings)
    create_tables(engine)
    secret = gateway_config(settings).key_secret
    ensure_operator_key(engine, secret, settings.operator_key_path, settings.owner)
    service = gateway_service(settings)
    pid, _ = start(settings.state_dir, service, cwd=PROJECT_ROOT)
    try:
        yield psutil.Process(pid)
    finally:
        stop(settings.state_dir, service)


@contextmanager
def peak_rss(process: psutil.Process) -> Iterator[list[int]]:
    """The process's largest resident set seen while the block runs, sampled every 20 ms."""
    peak = [process.memory_info().rss]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.02):
            peak[0] = max(peak[0], process.memory_info().rss)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        yield peak
    finally:
        done.set()
        sampler.join()
