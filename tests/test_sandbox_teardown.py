"""Stopping a sandbox leaves no process, directory or cgroup behind."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
from sandbox_support import (
    isolated_state,
    make_environment,
    make_task,
    sandbox_cgroups,
    sandbox_dirs,
)


@pytest.fixture(autouse=True)
def state_dir(tmp_path, monkeypatch):
    yield from isolated_state(tmp_path, monkeypatch)


def host_processes_with(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def test_stop_leaves_no_process_directory_or_cgroup(tmp_path):
    environment = make_environment(make_task(tmp_path), tmp_path / "trial")
    marker = "sandbox-teardown-probe"

    async def go():
        await environment.start(force_build=False)
        await environment.exec(f"nohup bash -c 'exec -a {marker} sleep 300' >/dev/null 2>&1 &")
        await environment.exec(f"setsid bash -c 'exec -a {marker}-2 sleep 300' &")
        running = host_processes_with(marker)
        init_pid = environment._init.pid
        await environment.stop(delete=True)
        return running, init_pid

    running, init_pid = asyncio.run(go())
    assert len(running) == 2
    assert host_processes_with(marker) == []
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


def test_sandbox_dies_with_the_process_that_started_it(tmp_path):
    """If the controlling process is killed outright, the sandbox goes with it."""
    script = tmp_path / "owner.py"
    script.write_text(
        "import asyncio, sys, time\n"
        "sys.path.insert(0, sys.argv[2])\n"
        "from pathlib import Path\n"
        "from sandbox_support import make_environment, make_task\n"
        "async def main():\n"
        "    env = make_environment(make_task(Path(sys.argv[1])), Path(sys.argv[1]) / 't')\n"
        "    await env.start(force_build=False)\n"
        "    await env.exec('nohup sleep 300 >/dev/null 2>&1 &')\n"
        "    print(env._init.pid, flush=True)\n"
        "    time.sleep(300)\n"
        "asyncio.run(main())\n"
    )

    async def go():
        owner = await asyncio.create_subprocess_exec(
            sys.executable,
            str(script),
            str(tmp_path),
            str(Path(__file__).parent),
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

    assert asyncio.run(go())
    # The owner died before it could remove its (now empty) cgroups and files.
    for path in sandbox_cgroups(next(iter(sandbox_dirs())).name):
        for leaf in path.iterdir():
            if leaf.is_dir():
                leaf.rmdir()
        path.rmdir()
