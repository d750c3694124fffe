"""task.toml's memory and CPU limits, and the pids limit, are enforced by cgroups."""

from __future__ import annotations

import asyncio

import pytest
from sandbox_support import (
    isolated_state,
    make_environment,
    make_task,
    requires_cgroups,
    run_trial,
)

from synth_pipelines.sandbox.errors import MemoryLimitExceededError

pytestmark = requires_cgroups

ALLOCATE_256_MB = "python3 -c \"block = b'x' * (256 * 2**20); print(len(block))\""
# Two busy processes for ~2 s of wall time; prints CPU seconds used per wall second.
BURN_CPU = """python3 - <<'PY'
import multiprocessing, os, time
def burn(seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass
start, wall = os.times(), time.monotonic()
workers = [multiprocessing.Process(target=burn, args=(2.0,)) for _ in range(2)]
[worker.start() for worker in workers]
[worker.join() for worker in workers]
end = os.times()
used = (end.children_user + end.children_system) - (start.children_user + start.children_system)
print(used / (time.monotonic() - wall))
PY"""

FORK_FLOOD = """python3 - <<'PY'
import subprocess
children, error = [], "none"
try:
    for _ in range(64):
        children.append(subprocess.Popen(["sleep", "5"]))
except OSError as failure:
    error = str(failure)
print(len(children), error)
for child in children:
    child.kill()
PY"""


@pytest.fixture(autouse=True)
def state_dir(tmp_path, monkeypatch):
    yield from isolated_state(tmp_path, monkeypatch)


def run(environment, command: str, **options):
    async def go():
        await environment.start(force_build=False)
        try:
            return await environment.exec(command, **options)
        finally:
            await environment.stop(delete=True)

    return asyncio.run(go())


def test_command_over_memory_limit_fails_with_clear_reason(tmp_path):
    task = make_task(tmp_path, extra_toml="\n[environment]\nmemory_mb = 64\n")
    environment = make_environment(task, tmp_path / "trial")
    with pytest.raises(MemoryLimitExceededError, match="memory limit of 64 MB"):
        run(environment, ALLOCATE_256_MB)


def test_command_under_memory_limit_succeeds(tmp_path):
    task = make_task(tmp_path, extra_toml="\n[environment]\nmemory_mb = 512\n")
    result = run(make_environment(task, tmp_path / "trial"), ALLOCATE_256_MB)
    assert result.stdout.strip() == str(256 * 2**20)


def test_memory_limit_failure_is_visible_in_the_trial_result(tmp_path):
    task = make_task(
        tmp_path,
        extra_toml="\n[environment]\nmemory_mb = 64\n",
        solve_sh=f"#!/bin/bash\n{ALLOCATE_256_MB}\n",
    )
    result = run_trial(task, tmp_path / "trials", "oracle")
    assert result.exception_info is not None
    assert result.exception_info.exception_type == "MemoryLimitExceededError"
    assert "memory limit of 64 MB" in result.exception_info.exception_message


def test_pids_limit_stops_a_fork_flood(tmp_path):
    environment = make_environment(make_task(tmp_path), tmp_path / "trial", pids_max=32)
    result = run(environment, FORK_FLOOD)
    started, error = result.stdout.split(maxsplit=1)
    assert 0 < int(started) < 32
    assert "Resource temporarily unavailable" in error


@pytest.mark.slow
def test_cpu_quota_caps_cpu_time(tmp_path):
    task = make_task(tmp_path, extra_toml="\n[environment]\ncpus = 0.25\n")
    result = run(make_environment(task, tmp_path / "trial"), BURN_CPU)
    cpus_used = float(result.stdout.strip())
    # Unlimited, two busy processes use well over 0.5 CPU even on a loaded 2-core host.
    assert cpus_used < 0.35, cpus_used
