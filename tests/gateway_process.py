"""`synth gateway serve` in its own process, and its memory watched while bulk bytes pass
by it: what the tests of upload and read grants measure."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import psutil
import pytest

from gateway.server import gateway_config
from synth_pipelines.config import Settings
from synth_pipelines.control.database import control_engine, create_tables
from synth_pipelines.services.operator_key import ensure_operator_key
from tests.conftest import PROJECT_ROOT
from tests.production_services import free_port

SYNTH = [sys.executable, "-m", "synth_pipelines.cli"]


@contextmanager
def gateway_process(monkeypatch: pytest.MonkeyPatch) -> Iterator[psutil.Process]:
    """`synth gateway serve` as `synth up` starts it, with the CLI pointed at it."""
    url = f"http://127.0.0.1:{free_port()}"
    monkeypatch.setenv("SYNTH_GATEWAY_URL", url)
    settings = Settings()
    engine = control_engine(settings)
    create_tables(engine)
    secret = gateway_config(settings).key_secret
    ensure_operator_key(engine, secret, settings.operator_key_path, settings.owner)
    process = subprocess.Popen(
        [*SYNTH, "gateway", "serve"],
        cwd=PROJECT_ROOT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert process.poll() is None and time.monotonic() < deadline, "no gateway"
            time.sleep(0.2)
        yield psutil.Process(process.pid)
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=30)


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
