"""Commands enter the sandbox through one forking launch server per sandbox: each holds
only its own descriptors, many run at once without mixing, and a server that dies fails
its commands instead of hanging them."""

from __future__ import annotations

import asyncio
import time

import pytest
from sandbox_support import isolated_state, make_environment, make_task

from synth_pipelines.sandbox.launch_server import LaunchServerGoneError


@pytest.fixture(autouse=True)
def state_dir(tmp_path, monkeypatch):
    yield from isolated_state(tmp_path, monkeypatch)


def _in_sandbox(tmp_path, scenario):
    environment = make_environment(make_task(tmp_path), tmp_path / "trial")

    async def go():
        await environment.start(force_build=False)
        try:
            return await scenario(environment)
        finally:
            await environment.stop(delete=True)

    return asyncio.run(go())


def test_a_command_holds_only_its_standard_descriptors(tmp_path):
    async def scenario(environment):
        slow = asyncio.create_task(environment.exec("sleep 2"))
        await asyncio.sleep(0.3)  # another command's pipes are open in the server now
        listed = await environment.exec("ls -l /proc/self/fd | tail -n +2")
        await slow
        return listed

    listed = _in_sandbox(tmp_path, scenario)
    assert listed.return_code == 0, listed.stderr
    descriptors = {line.split()[-3]: line.split()[-1] for line in listed.stdout.splitlines()}
    # 0-2 are its stdio; 3 is the directory `ls` itself opened to list them.
    assert set(descriptors) == {"0", "1", "2", "3"}, listed.stdout
    assert descriptors["3"].startswith("/proc/"), listed.stdout


def test_concurrent_commands_keep_their_own_output_and_exit_codes(tmp_path):
    async def scenario(environment):
        return await asyncio.gather(
            *(
                environment.exec(f"sleep 0.$((RANDOM % 5)); echo out-{i}; exit {i % 7}")
                for i in range(24)
            )
        )

    results = _in_sandbox(tmp_path, scenario)
    for i, result in enumerate(results):
        assert result.stdout == f"out-{i}\n"
        assert result.return_code == i % 7


def test_a_background_process_of_one_command_never_holds_another_commands_output(tmp_path):
    async def scenario(environment):
        first = asyncio.create_task(environment.exec("sleep 1; echo first"))
        await asyncio.sleep(0.2)
        await environment.exec("setsid sleep 30 </dev/null >/dev/null 2>&1 &")
        started = time.monotonic()
        done = await first
        return done, time.monotonic() - started

    done, waited = _in_sandbox(tmp_path, scenario)
    assert done.stdout == "first\n"
    # Had the background sleep inherited the first command's stdout, its output would
    # stay open and the first command would end only after the output grace (0.5 s).
    assert waited < 1.2


def test_a_dead_launch_server_fails_its_commands_instead_of_hanging_them(tmp_path):
    async def scenario(environment):
        running = asyncio.create_task(environment.exec("sleep 5"))
        await asyncio.sleep(0.3)
        environment._init.launcher.process.kill()
        with pytest.raises(LaunchServerGoneError):
            async with asyncio.timeout(10):
                await running
        with pytest.raises(LaunchServerGoneError):
            await environment.exec("true")
        return True

    assert _in_sandbox(tmp_path, scenario)
