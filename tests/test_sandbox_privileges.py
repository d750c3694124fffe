"""Commands run without capabilities, as root by default or as a requested user, and
every id inside is an unprivileged id of the host: root inside is not host root."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from sandbox_support import isolated_state, make_environment, make_task

from synth_pipelines.sandbox.errors import SandboxUserError
from synth_pipelines.sandbox.filesystem import PROC_READ_ONLY
from synth_pipelines.sandbox.namespace_owner import OWNER_ID_BASE, SLOT_COUNT
from synth_pipelines.sandbox.userns import HOST_ID_BASE, SETUP_ID


@pytest.fixture(autouse=True)
def state_dir(tmp_path, monkeypatch):
    yield from isolated_state(tmp_path, monkeypatch)


def run(environment, *commands, user=None):
    async def go():
        await environment.start(force_build=False)
        try:
            return [await environment.exec(command, user=user) for command in commands]
        finally:
            await environment.stop(delete=True)

    return asyncio.run(go())


def test_root_in_the_sandbox_has_no_capabilities(tmp_path):
    caps, mount, proc_sys = run(
        make_environment(make_task(tmp_path), tmp_path / "trial"),
        "grep -E '^Cap(Inh|Prm|Eff|Bnd|Amb)' /proc/self/status",
        "mount -t tmpfs none /mnt",
        "echo 1 > /proc/sys/kernel/sysrq",
    )
    values = {line.split(":")[0]: line.split()[1] for line in caps.stdout.splitlines()}
    assert set(values.values()) == {"0000000000000000"}, values
    assert mount.return_code != 0
    assert proc_sys.return_code != 0


def test_commands_run_as_a_requested_numeric_user(tmp_path):
    identity, write = run(
        make_environment(make_task(tmp_path), tmp_path / "trial"),
        "id -u; id -g",
        "echo x > /app/owned-by-root-dir",
        user=4321,
    )
    assert identity.stdout.split() == ["4321", "4321"]
    assert write.return_code != 0


def test_unknown_user_name_is_refused_clearly(tmp_path):
    with pytest.raises(SandboxUserError, match="'no-such-user' is not defined"):
        run(
            make_environment(make_task(tmp_path), tmp_path / "trial"),
            "true",
            user="no-such-user",
        )


# Host-wide settings: each is written back with the value it already has, so that the
# test changes nothing even where the write is wrongly allowed; the write must fail.
HOST_SYSCTLS = ("kernel/core_pattern", "kernel/pid_max", "vm/overcommit_memory")
WRITE_BACK = "value=$(cat /proc/sys/{name}) && printf '%s\\n' \"$value\" > /proc/sys/{name}"


def test_host_sysctls_are_refused_even_written_back_unchanged(tmp_path):
    """`|cmd` written to kernel.core_pattern, then a crash, ran cmd as host root."""
    before = {name: Path("/proc/sys", name).read_text() for name in HOST_SYSCTLS}
    results = run(
        make_environment(make_task(tmp_path), tmp_path / "trial"),
        *(WRITE_BACK.format(name=name) for name in HOST_SYSCTLS),
    )
    for name, result in zip(HOST_SYSCTLS, results, strict=True):
        assert result.return_code != 0, name
        assert "Read-only file system" in result.stderr, (name, result)
    assert {name: Path("/proc/sys", name).read_text() for name in HOST_SYSCTLS} == before


def test_proc_entries_that_reach_the_host_are_read_only(tmp_path):
    (mounts,) = run(
        make_environment(make_task(tmp_path), tmp_path / "trial"),
        "cat /proc/self/mountinfo",
    )
    options = {line.split()[4]: line.split()[5] for line in mounts.stdout.splitlines()}
    for name in PROC_READ_ONLY:
        if Path("/proc", name).exists():
            assert options[f"/proc/{name}"].split(",")[0] == "ro", (name, options)


def sandbox_processes(environment) -> list[str]:
    """The /proc status of every process in the sandbox's pid namespace, seen from the host."""
    namespace = os.stat(f"/proc/{environment._init.pid}/ns/pid").st_ino
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and os.stat(entry / "ns" / "pid").st_ino == namespace:
                found.append((entry / "status").read_text())
        except (FileNotFoundError, PermissionError):
            continue
    return found


def test_ids_inside_are_unprivileged_host_ids(tmp_path):
    """Root inside is host uid HOST_ID_BASE, a user inside HOST_ID_BASE + its uid, the
    init the sandbox's own owner id, and every process inside runs as one of them."""
    environment = make_environment(make_task(tmp_path), tmp_path / "trial")

    async def go():
        await environment.start(force_build=False)
        try:
            mapping = await environment.exec("cat /proc/self/uid_map /proc/self/gid_map")
            await environment.exec("sleep 300 >/dev/null 2>&1 &")
            await environment.exec("sleep 300 >/dev/null 2>&1 &", user=4321)
            uids = [
                int(line.split()[1])
                for status in sandbox_processes(environment)
                for line in status.splitlines()
                if line.startswith("Uid:")
            ]
            return mapping, uids
        finally:
            await environment.stop(delete=True)

    mapping, uids = asyncio.run(go())
    shared, own = ["0", str(HOST_ID_BASE), str(SETUP_ID)], [str(SETUP_ID), "1"]
    fields = mapping.stdout.split()
    assert fields[:3] == shared and [fields[3], fields[5]] == own, fields
    owner = int(fields[4])
    assert fields == [*shared, str(SETUP_ID), str(owner), "1"] * 2, fields
    assert OWNER_ID_BASE <= owner < OWNER_ID_BASE + SLOT_COUNT, owner
    assert {HOST_ID_BASE, HOST_ID_BASE + 4321, owner} <= set(uids), uids
    assert all(HOST_ID_BASE <= uid < HOST_ID_BASE + SETUP_ID or uid == owner for uid in uids), uids


def test_files_inside_belong_to_the_sandbox_ids_on_the_host(tmp_path):
    environment = make_environment(make_task(tmp_path), tmp_path / "trial")

    async def go():
        await environment.start(force_build=False)
        await environment.exec("touch /app/by-root")
        await environment.exec("touch /tmp/by-user", user=4321)
        await environment.stop(delete=False)

    asyncio.run(go())
    app = environment.sandbox_dir / "fs" / "app"
    assert (app / "by-root").stat().st_uid == HOST_ID_BASE
    assert (app / "seed.txt").stat().st_uid == HOST_ID_BASE  # laid down by the host
    assert (environment.sandbox_dir / "fs" / "tmp" / "by-user").stat().st_uid == HOST_ID_BASE + 4321


def test_a_uid_the_sandbox_does_not_map_is_refused_clearly(tmp_path):
    with pytest.raises(SandboxUserError, match="maps ids 0-65535"):
        run(make_environment(make_task(tmp_path), tmp_path / "trial"), "true", user=70000)
