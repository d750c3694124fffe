"""Stopping a sandbox leaves no process, directory or cgroup behind."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest
from sandbox_support import (
    isolated_state,
    make_environment,
    make_task,
    processes_with,
    sandbox_cgroups,
    sandbox_dirs,
    wait_for_processes,
)

from synth_pipelines.sandbox.leases import reclaim_orphans
from synth_pipelines.sandbox.limits import detect_hierarchy
from synth_pipelines.sandbox.storage import can_mount_sized_filesystem


@pytest.fixture(autouse=True)
def state_dir(tmp_path, monkeypatch):
    yield from isolated_state(tmp_path, monkeypatch)


def test_stop_leaves_no_process_directory_or_cgroup(tmp_path):
    environment = make_environment(make_task(tmp_path), tmp_path / "trial")
    marker = "sandbox-teardown-probe"

    async def go():
        await environment.start(force_build=False)
        await environment.exec(f"nohup bash -c 'exec -a {marker} sleep 300' >/dev/null 2>&1 &")
        await environment.exec(f"setsid bash -c 'exec -a {marker}-2 sleep 300' &")
        running = wait_for_processes(marker, 2)
        init_pid = environment._init.pid
        await environment.stop(delete=True)
        return running, init_pid

    running, init_pid = asyncio.run(go())
    assert len(running) == 2
    assert processes_with(marker) == {}
    assert not Path(f"/proc/{init_pid}").exists()
    assert sandbox_dirs() == []
    assert sandbox_cgroups(environment.sandbox_dir.name) == []


def test_stop_without_delete_keeps_files_but_no_processes(tmp_path):
    environment = make_environment(make_task(tmp_path), tmp_path / "trial")

    async def go():
        await environment.start(force_build=False)
        await environment.exec("echo kept > /app/kept.txt")
        init_pid = environment._init.pid
        await environment.stop(delete=False)
        return init_pid

    init_pid = asyncio.run(go())
    assert not Path(f"/proc/{init_pid}").exists()
    assert (environment.sandbox_dir / "fs" / "app" / "kept.txt").read_text() == "kept\n"
    assert sandbox_cgroups(environment.sandbox_dir.name) == []


OWNER_SCRIPT = """\
import asyncio, sys, time
sys.path.insert(0, sys.argv[2])
from pathlib import Path
from sandbox_support import make_environment, make_task
async def main():
    root = Path(sys.argv[1])
    env = make_environment(make_task(root, extra_toml=sys.argv[3]), root / 't')
    await env.start(force_build=False)
    await env.exec('echo kept > /app/kept.txt; nohup sleep 300 >/dev/null 2>&1 &')
    print(env._init.pid, flush=True)
    time.sleep(300)
asyncio.run(main())
"""


def killed_owner(tmp_path: Path, extra_toml: str = "") -> bool:
    """Start a sandbox in another process, SIGKILL that process; whether the sandbox's
    init died with it."""
    script = tmp_path / "owner.py"
    script.write_text(OWNER_SCRIPT)

    async def go():
        owner = await asyncio.create_subprocess_exec(
            sys.executable,
            str(script),
            str(tmp_path),
            str(Path(__file__).parent),
            extra_toml,
            stdout=asyncio.subprocess.PIPE,
        )
        init_pid = int((await owner.stdout.readline()).decode())
        owner.kill()
        await owner.wait()
        for _ in range(100):
            if not Path(f"/proc/{init_pid}").exists():
                return True
            await asyncio.sleep(0.05)
        return False

    return asyncio.run(go())


def test_sandbox_dies_with_the_process_that_started_it(tmp_path):
    """If the controlling process is killed outright, the sandbox's processes go with it."""
    assert killed_owner(tmp_path)
    orphan = sandbox_dirs()[0]
    assert (orphan / "lease").exists()
    (reclaimed,) = reclaim_orphans(orphan.parent, detect_hierarchy())
    assert reclaimed.sandbox_dir == orphan and reclaimed.quarantine is None


def test_the_next_sandbox_reclaims_what_a_killed_owner_left(tmp_path):
    """The cgroup goes, the storage filesystem is unmounted, the files stay on disk."""
    assert killed_owner(tmp_path, "\n[environment]\nstorage_mb = 8\n")
    orphan = sandbox_dirs()[0]
    if can_mount_sized_filesystem():
        assert os.path.ismount(orphan / "fs")
    if detect_hierarchy() is not None:
        assert sandbox_cgroups(orphan.name) != []
    following = make_environment(make_task(tmp_path, "following"), tmp_path / "following-trial")

    async def go():
        await following.start(force_build=False)
        await following.stop(delete=True)

    asyncio.run(go())
    assert sandbox_dirs() == [orphan]
    assert not os.path.ismount(orphan / "fs")
    assert (orphan / "fs" / "app" / "kept.txt").read_text() == "kept\n"
    assert sorted(path.name for path in orphan.iterdir()) == ["fs"]
    assert sandbox_cgroups(orphan.name) == []
    assert reclaim_orphans(orphan.parent, detect_hierarchy()) == []


def test_a_running_sandbox_is_not_reclaimed(tmp_path):
    environment = make_environment(
        make_task(tmp_path, extra_toml="\n[environment]\nstorage_mb = 8\n"), tmp_path / "trial"
    )

    async def go():
        await environment.start(force_build=False)
        try:
            reclaimed = reclaim_orphans(environment.sandbox_dir.parent, detect_hierarchy())
            answer = await environment.exec("echo still here > /app/probe.txt; cat /app/probe.txt")
        finally:
            await environment.stop(delete=True)
        return reclaimed, answer

    reclaimed, answer = asyncio.run(go())
    assert reclaimed == []
    assert answer.return_code == 0 and answer.stdout == "still here\n"
