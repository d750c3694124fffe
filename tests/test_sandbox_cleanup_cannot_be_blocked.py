"""Nothing a sandbox holds can block its own teardown or a later sandbox's start.

What an agent once did (a new user namespace, cgroupfs mounted inside, a cgroup made
below its command's leaf) is refused now (`test_sandbox_seccomp.py`), but teardown does
not rely on that: the cgroups below a sandbox's are removed depth first with what runs
in them, and what still cannot be removed (here, a process frozen by the host's
freezer cgroup, which SIGKILL cannot end) is quarantined and reported, while the next
sandbox starts as usual.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from sandbox_support import (
    isolated_state,
    make_environment,
    make_task,
    requires_cgroups,
    sandbox_cgroups,
    sandbox_dirs,
    wait_for,
    wait_for_processes,
)

from synth_pipelines.config import Settings
from synth_pipelines.sandbox.limits import SandboxCgroup, detect_hierarchy
from synth_pipelines.sandbox.quarantine import CGROUP_PREFIX, QUARANTINE_DIR_NAME, RECORD_NAME

FREEZER = Path("/sys/fs/cgroup/freezer")

pytestmark = requires_cgroups
requires_freezer = pytest.mark.skipif(
    not (FREEZER / "cgroup.procs").exists(),
    reason="needs the cgroup v1 freezer, where a frozen process cannot die of SIGKILL",
)


@pytest.fixture(autouse=True)
def state_dir(tmp_path, monkeypatch):
    yield from isolated_state(tmp_path, monkeypatch)


@contextmanager
def frozen(pid: int) -> Iterator[None]:
    """Freeze `pid` in a freezer cgroup of its own; thawed (and so able to die) after."""
    cgroup = FREEZER / f"synth-test-{secrets.token_hex(4)}"
    cgroup.mkdir()
    try:
        (cgroup / "cgroup.procs").write_text(str(pid))
        (cgroup / "freezer.state").write_text("FROZEN")
        wait_for(lambda: (cgroup / "freezer.state").read_text().strip() == "FROZEN")
        yield
    finally:
        (cgroup / "freezer.state").write_text("THAWED")
        wait_for(lambda: not (cgroup / "cgroup.procs").read_text().split())
        cgroup.rmdir()


def remove_quarantined_cgroups(name: str) -> None:
    SandboxCgroup(detect_hierarchy(), f"{CGROUP_PREFIX}{name}").remove()


def quarantine_record(name: str) -> dict:
    place = Settings().sandboxes_dir.with_name(QUARANTINE_DIR_NAME) / name
    return json.loads((place / RECORD_NAME).read_text())


async def start_and_stop_another(tmp_path: Path) -> str:
    environment = make_environment(make_task(tmp_path, "following"), tmp_path / "following")
    await environment.start(force_build=False)
    try:
        return (await environment.exec("echo started")).stdout
    finally:
        await environment.stop(delete=True)


def test_cgroups_made_below_a_command_go_with_what_runs_in_them(tmp_path):
    """A cgroup made below a command's leaf, with a process moved into it (what the
    agent did after mounting cgroupfs in its own namespaces), used to make `stop()`
    raise and leave the cgroups, mounts and lease behind."""
    environment = make_environment(make_task(tmp_path), tmp_path / "trial")
    marker = f"nested-cgroup-{secrets.token_hex(4)}"

    async def go():
        await environment.start(force_build=False)
        await environment.exec(f"setsid bash -c 'exec -a {marker} sleep 300' >/dev/null 2>&1 &")
        (pid,) = wait_for_processes(marker, 1)
        for sandbox in sandbox_cgroups(environment.sandbox_dir.name):
            (leaf,) = [
                child
                for child in sandbox.iterdir()
                if child.is_dir() and str(pid) in (child / "cgroup.procs").read_text().split()
            ]
            nested = leaf / "made-inside" / "deeper"
            nested.mkdir(parents=True)
            (nested / "cgroup.procs").write_text(str(pid))
        await environment.stop(delete=True)
        return pid

    pid = asyncio.run(go())
    assert not Path(f"/proc/{pid}").exists()
    assert sandbox_cgroups(environment.sandbox_dir.name) == []
    assert sandbox_dirs() == []


@requires_freezer
def test_a_sandbox_that_cannot_be_removed_is_quarantined_and_the_next_one_starts(tmp_path, caplog):
    environment = make_environment(make_task(tmp_path), tmp_path / "trial")
    name = environment.sandbox_dir.name
    marker = f"unkillable-{secrets.token_hex(4)}"

    async def go():
        await environment.start(force_build=False)
        await environment.exec(f"setsid bash -c 'exec -a {marker} sleep 300' >/dev/null 2>&1 &")
        (pid,) = wait_for_processes(marker, 1)
        with frozen(pid), caplog.at_level(logging.WARNING):
            await environment.stop(delete=True)
            return await start_and_stop_another(tmp_path)

    try:
        following = asyncio.run(go())
    finally:
        remove_quarantined_cgroups(name)
    assert following == "started\n"
    record = quarantine_record(name)
    assert any("survived SIGKILL" in problem for problem in record["problems"]), record
    assert all(Path(path).name == f"{CGROUP_PREFIX}{name}" for path in record["cgroups"])
    assert len(record["cgroups"]) == len({*detect_hierarchy().mounts.values()})
    assert sandbox_cgroups(name) == []
    assert sandbox_dirs() == []
    assert f"could not be removed completely and is quarantined ({tmp_path}" in caplog.text


OWNER_SCRIPT = """\
import asyncio, sys, time
sys.path.insert(0, sys.argv[2])
from pathlib import Path
from sandbox_support import make_environment, make_task
async def main():
    root = Path(sys.argv[1])
    env = make_environment(make_task(root), root / 't')
    await env.start(force_build=False)
    await env.exec("setsid bash -c 'exec -a " + sys.argv[3] + " sleep 300' >/dev/null 2>&1 &")
    print(env.sandbox_dir.name, flush=True)
    time.sleep(300)
asyncio.run(main())
"""


@requires_freezer
def test_an_orphan_that_cannot_be_removed_is_quarantined_and_the_next_start_succeeds(
    tmp_path, caplog
):
    """Orphan reclaim runs before a process's first sandbox; an orphan it could not
    remove used to fail every later start in that state directory."""
    script = tmp_path / "owner.py"
    script.write_text(OWNER_SCRIPT)
    marker = f"unkillable-orphan-{secrets.token_hex(4)}"
    owner = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path), str(Path(__file__).parent), marker],
        stdout=subprocess.PIPE,
        text=True,
    )
    name = owner.stdout.readline().strip()
    (pid,) = wait_for_processes(marker, 1)
    try:
        with frozen(pid), caplog.at_level(logging.WARNING):
            owner.kill()
            owner.wait()
            following = asyncio.run(start_and_stop_another(tmp_path))
    finally:
        remove_quarantined_cgroups(name)
    assert following == "started\n"
    record = quarantine_record(name)
    assert any("survived SIGKILL" in problem for problem in record["problems"]), record
    assert sandbox_cgroups(name) == []
    assert sandbox_dirs() == []
    assert "could not be removed and is quarantined" in caplog.text
