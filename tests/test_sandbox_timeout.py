"""A timeout or a cancellation kills the command's whole process tree."""

from __future__ import annotations

import asyncio
import time

import pytest
from sandbox_support import isolated_state, make_environment, make_task, requires_cgroups

from synth_pipelines.sandbox.errors import SandboxCommandTimeoutError

# The child detaches into its own session, so only a kill of the whole tree stops it.
LATE_WRITER = "setsid bash -c 'sleep 2; echo late > /app/marker' & sleep 30"


@pytest.fixture(autouse=True)
def state_dir(tmp_path, monkeypatch):
    yield from isolated_state(tmp_path, monkeypatch)


@requires_cgroups
def test_timeout_kills_the_command_and_its_detached_children(tmp_path):
    environment = make_environment(make_task(tmp_path), tmp_path / "trial")
    marker = environment.sandbox_dir / "fs" / "app" / "marker"

    async def go():
        await environment.start(force_build=False)
        try:
            started = time.monotonic()
            with pytest.raises(SandboxCommandTimeoutError, match="timed out after 1 seconds"):
                await environment.exec(LATE_WRITER, timeout_sec=1)
            elapsed = time.monotonic() - started
            await asyncio.sleep(2.5)
            survivors = await environment.exec("ps -e -o comm= | grep -c sleep || true")
            return elapsed, marker.exists(), survivors.stdout.strip()
        finally:
            await environment.stop(delete=True)

    elapsed, marker_written, sleeping = asyncio.run(go())
    assert elapsed < 3
    assert not marker_written
    assert sleeping == "1"  # only the init's own sleep is left


@requires_cgroups
def test_cancellation_kills_the_command_and_its_detached_children(tmp_path):
    environment = make_environment(make_task(tmp_path), tmp_path / "trial")
    marker = environment.sandbox_dir / "fs" / "app" / "marker"

    async def go():
        await environment.start(force_build=False)
        try:
            command = asyncio.create_task(environment.exec(LATE_WRITER))
            await asyncio.sleep(0.5)
            command.cancel()
            with pytest.raises(asyncio.CancelledError):
                await command
            await asyncio.sleep(2.5)
            return marker.exists()
        finally:
            await environment.stop(delete=True)

    assert asyncio.run(go()) is False


def test_background_processes_persist_between_commands(tmp_path):
    environment = make_environment(make_task(tmp_path), tmp_path / "trial")

    async def go():
        await environment.start(force_build=False)
        try:
            await environment.exec("nohup sleep 30 >/dev/null 2>&1 &")
            return await environment.exec("pgrep -c -x sleep")
        finally:
            await environment.stop(delete=True)

    assert asyncio.run(go()).stdout.strip() == "2"  # the init's sleep and the command's
