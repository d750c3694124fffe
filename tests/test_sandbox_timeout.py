"""A timeout or a cancellation kills the command's whole process tree."""

from __future__ import annotations

import asyncio
import time

import pytest
from sandbox_support import isolated_state, make_environment, make_task, requires_cgroups

from synth_pipelines.sandbox.errors import SandboxCommandTimeoutError

# The child detaches into its own session, so only a kill of the whole tree stops it. It
# appends to a file for as long as it lives: the file stops growing once it is killed,
# however long a loaded host takes to get there. The kill is over before the timeout or
# cancellation reaches the caller, so the tests look for survivors right then.
WRITER = "setsid bash -c 'while :; do echo alive >> /app/marker; sleep 0.1; done' & sleep 30"
SURVIVORS = "ps -e -o comm= | grep -c sleep || true"
# Long enough for a surviving writer to append several times, even on a loaded host.
GROWTH_WINDOW_SEC = 2.0


async def _marker_grows(marker) -> bool:
    """Whether the writer still appends to its file."""
    before = marker.stat().st_size if marker.exists() else 0
    await asyncio.sleep(GROWTH_WINDOW_SEC)
    return (marker.stat().st_size if marker.exists() else 0) > before


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
                await environment.exec(WRITER, timeout_sec=1)
            elapsed = time.monotonic() - started
            survivors = await environment.exec(SURVIVORS)
            return elapsed, await _marker_grows(marker), survivors.stdout.strip()
        finally:
            await environment.stop(delete=True)

    elapsed, still_writing, sleeping = asyncio.run(go())
    assert elapsed < 10  # the timeout, not the command's 30 s
    assert not still_writing
    assert sleeping == "1"  # only the init's own sleep is left


@requires_cgroups
def test_cancellation_kills_the_command_and_its_detached_children(tmp_path):
    environment = make_environment(make_task(tmp_path), tmp_path / "trial")
    marker = environment.sandbox_dir / "fs" / "app" / "marker"

    async def go():
        await environment.start(force_build=False)
        try:
            command = asyncio.create_task(environment.exec(WRITER))
            await asyncio.sleep(0.5)
            command.cancel()
            with pytest.raises(asyncio.CancelledError):
                await command
            survivors = await environment.exec(SURVIVORS)
            return await _marker_grows(marker), survivors.stdout.strip()
        finally:
            await environment.stop(delete=True)

    still_writing, sleeping = asyncio.run(go())
    assert not still_writing
    assert sleeping == "1"  # only the init's own sleep is left


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
