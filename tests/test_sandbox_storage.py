"""task.toml's storage_mb bounds a sandbox's writable state with a size-limited filesystem."""

from __future__ import annotations

import asyncio
import os

import pytest
from sandbox_support import (
    isolated_state,
    make_environment,
    make_task,
    requires_cgroups,
    run_trial,
)

from synth_pipelines.sandbox.errors import SandboxPathError
from synth_pipelines.sandbox.storage import can_mount_sized_filesystem

pytestmark = pytest.mark.skipif(
    not can_mount_sized_filesystem(), reason="this host cannot mount a filesystem image"
)

STORAGE_8_MB = "\n[environment]\nstorage_mb = 8\n"
WRITE_6_MB_TO_APP = "dd if=/dev/zero of=/app/six bs=1M count=6 status=none"
WRITE_6_MB_TO_TMP = "dd if=/dev/zero of=/tmp/six bs=1M count=6 status=none"
FILL_THEN_REPORT = """#!/bin/bash
error=$(dd if=/dev/zero of=/app/fill bs=1M status=none 2>&1)
rm -f /app/fill
echo "$error"
"""


@pytest.fixture(autouse=True)
def state_dir(tmp_path, monkeypatch):
    yield from isolated_state(tmp_path, monkeypatch)


def limited_environment(tmp_path, name="storage-probe", **overrides):
    task = make_task(tmp_path, name, extra_toml=STORAGE_8_MB)
    return make_environment(task, tmp_path / f"trial-{name}", **overrides)


def test_write_past_storage_mb_fails_with_enospc_inside_the_sandbox(tmp_path):
    """/app and /tmp share one 8 MB filesystem: the second 6 MB write runs out of space."""
    environment = limited_environment(tmp_path)

    async def go():
        await environment.start(force_build=False)
        try:
            first = await environment.exec(WRITE_6_MB_TO_APP)
            second = await environment.exec(WRITE_6_MB_TO_TMP)
            usage = await environment.exec("df -k --output=size /tmp | tail -1")
            return first, second, usage
        finally:
            await environment.stop(delete=True)

    first, second, usage = asyncio.run(go())
    assert first.return_code == 0
    assert second.return_code != 0
    assert "No space left on device" in second.stderr
    assert 6 * 1024 < int(usage.stdout) <= 8 * 1024


def test_full_sandbox_leaves_other_sandboxes_and_the_host_writable(tmp_path):
    """The full sandbox filled an 8 MB filesystem of its own, not the host's."""
    full = limited_environment(tmp_path, "storage-full")
    neighbour = limited_environment(tmp_path, "storage-neighbour")

    async def go():
        await full.start(force_build=False)
        await neighbour.start(force_build=False)
        try:
            filled = await full.exec("dd if=/dev/zero of=/app/fill bs=1M status=none")
            written = await neighbour.exec(WRITE_6_MB_TO_APP)
            fill = full.sandbox_dir / "fs" / "app" / "fill"
            fill_device, fill_size = fill.stat().st_dev, fill.stat().st_size
            full_fs = os.statvfs(full.sandbox_dir / "fs")
            return filled, written, fill_device, fill_size, full_fs
        finally:
            await full.stop(delete=True)
            await neighbour.stop(delete=True)

    filled, written, fill_device, fill_size, full_fs = asyncio.run(go())
    assert "No space left on device" in filled.stderr
    assert written.return_code == 0
    assert fill_device != tmp_path.stat().st_dev
    assert full_fs.f_blocks * full_fs.f_frsize <= 8 * 2**20
    assert fill_size <= 8 * 2**20


@requires_cgroups
def test_files_written_do_not_count_against_the_memory_limit(tmp_path):
    """The filesystem is disk-backed: 200 MB of files fit a sandbox limited to 64 MB of
    memory, because written pages are reclaimed as in a container."""
    task = make_task(tmp_path, extra_toml="\n[environment]\nstorage_mb = 256\nmemory_mb = 64\n")
    environment = make_environment(task, tmp_path / "trial")

    async def go():
        await environment.start(force_build=False)
        try:
            written = await environment.exec(
                "dd if=/dev/zero of=/app/fill bs=1M count=200 status=none"
            )
            size = await environment.exec("stat -c %s /app/fill")
            return written, size
        finally:
            await environment.stop(delete=True)

    written, size = asyncio.run(go())
    assert written.return_code == 0, written.stderr
    assert int(size.stdout) == 200 * 2**20


def test_full_sandbox_can_still_hand_over_its_logs(tmp_path):
    """Transfers do not stage inside the sandbox, so a full one can still be downloaded."""
    environment = limited_environment(tmp_path)
    downloads = tmp_path / "downloads"

    async def go():
        await environment.start(force_build=False)
        try:
            await environment.exec("mkdir -p /logs/agent && echo done > /logs/agent/note.txt")
            await environment.exec("dd if=/dev/zero of=/app/fill bs=1M status=none")
            await environment.download_dir("/logs/agent", downloads / "agent")
            await environment.download_file("/logs/agent/note.txt", downloads / "note.txt")
        finally:
            await environment.stop(delete=True)

    asyncio.run(go())
    assert (downloads / "agent" / "note.txt").read_text() == "done\n"
    assert (downloads / "note.txt").read_text() == "done\n"


def test_download_that_reaches_beyond_the_sandbox_files_is_refused(tmp_path):
    """A link to the host's /usr in place of /logs/agent would pour /usr onto the host's
    disk; the download is cut off at twice storage_mb and refused."""
    environment = limited_environment(tmp_path)
    downloads = tmp_path / "downloads"

    async def go():
        await environment.start(force_build=False)
        try:
            await environment.exec("rm -rf /logs/agent && ln -s /usr /logs/agent")
            await environment.download_dir("/logs/agent", downloads)
        finally:
            await environment.stop(delete=True)

    with pytest.raises(SandboxPathError, match="exceeds 16 MB, twice the sandbox's storage_mb"):
        asyncio.run(go())
    assert not downloads.exists()


def test_override_storage_mb_replaces_the_task_value(tmp_path):
    environment = limited_environment(tmp_path, override_storage_mb=16)

    async def go():
        await environment.start(force_build=False)
        try:
            return await environment.exec("df -k --output=size /app | tail -1")
        finally:
            await environment.stop(delete=True)

    assert 8 * 1024 < int(asyncio.run(go()).stdout) <= 16 * 1024


def test_stop_unmounts_and_without_delete_keeps_the_files_on_disk(tmp_path):
    environment = limited_environment(tmp_path)
    writable_root = environment.sandbox_dir / "fs"

    async def go():
        await environment.start(force_build=False)
        mounted_while_running = os.path.ismount(writable_root)
        await environment.exec("echo kept > /app/kept.txt")
        await environment.stop(delete=False)
        return mounted_while_running

    assert asyncio.run(go())
    assert not os.path.ismount(writable_root)
    assert (writable_root / "app" / "kept.txt").read_text() == "kept\n"


def test_stop_with_delete_unmounts_and_removes_the_sandbox(tmp_path):
    environment = limited_environment(tmp_path)

    async def go():
        await environment.start(force_build=False)
        await environment.stop(delete=True)

    asyncio.run(go())
    assert not environment.sandbox_dir.exists()


def test_disk_exhaustion_is_visible_in_the_trial_result(tmp_path):
    """The oracle fills its disk, then frees it so its log (on the same disk) can say why."""
    task = make_task(
        tmp_path,
        extra_toml=STORAGE_8_MB,
        solve_sh=FILL_THEN_REPORT,
    )
    result = run_trial(task, tmp_path / "trials", "oracle")
    assert result.exception_info is None
    trial_dir = tmp_path / "trials" / result.trial_name
    oracle_log = (trial_dir / "agent" / "oracle.txt").read_text()
    assert "No space left on device" in oracle_log
    assert result.verifier_result.rewards == {"reward": 0}
