"""Commands run without capabilities, as root by default or as a requested user."""

from __future__ import annotations

import asyncio

import pytest
from sandbox_support import isolated_state, make_environment, make_task

from synth_pipelines.sandbox.errors import SandboxUserError


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
