"""An image build's RUN steps run like attempts: no network but the package registries,
the sandbox's seccomp filter, the task's memory, pids and storage limits, and a breach
fails the build naming the limit.

Before, a RUN step ran in the host's network namespace, outside any cgroup and without
the seccomp filter: it reached services on the host's loopback, and used memory,
processes and disk past the task's limits.
"""

from __future__ import annotations

import asyncio
import secrets
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from sandbox_support import isolated_state, make_environment, make_task, requires_cgroups

from synth_pipelines.sandbox.errors import MemoryLimitExceededError, TaskDefinitionError
from synth_pipelines.sandbox.storage import can_mount_sized_filesystem

BASE = "python:3.11-slim"
# Reaches for the host's loopback directly, and through the step's proxy settings.
PROBE = (
    "RUN {{ python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}), 3)' "
    "&& echo 'direct: reached' || echo 'direct: refused'; }} > /probe.txt 2>&1 && "
    "{{ python3 -c 'import urllib.request as u; u.urlopen(\"http://127.0.0.1:{port}/\", None, 5)' "
    "&& echo 'proxied: reached' || echo 'proxied: refused'; }} >> /probe.txt 2>&1\n"
)
REGISTRIES = (
    "RUN pip install --no-cache-dir six==1.17.0 && apt-get update && "
    "apt-get install -y --no-install-recommends patch && rm -rf /var/lib/apt/lists/*\n"
)


@pytest.fixture(autouse=True)
def state_dir(tmp_path, monkeypatch):
    yield from isolated_state(tmp_path, monkeypatch)


@pytest.fixture
def host_listener() -> Iterator[tuple[int, list[str]]]:
    """A TCP listener on the host's loopback (its port), and what connected to it."""
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[str] = []

    def serve() -> None:
        while True:
            try:
                connection, peer = listener.accept()
            except OSError:
                return
            accepted.append(str(peer))
            connection.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n")
            connection.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield listener.getsockname()[1], accepted
    listener.shutdown(socket.SHUT_RDWR)  # wakes the accept
    listener.close()
    thread.join(timeout=5)


def image_task(root: Path, steps: str, *, environment_toml: str = "") -> Path:
    """A task whose image starts from a nonce step, so its layers are new to any cache
    (the base, the expensive part, is shared)."""
    dockerfile = f"FROM {BASE}\nRUN echo {secrets.token_hex(8)} > /nonce\n{steps}"
    extra = f"[environment]\n{environment_toml}" if environment_toml else ""
    return make_task(root, "build-probe", dockerfile=dockerfile, extra_toml=extra)


def start_and_run(environment, command: str) -> str:
    async def go() -> str:
        await environment.start(force_build=False)
        try:
            result = await environment.exec(command)
            return (result.stdout or "") + (result.stderr or "")
        finally:
            await environment.stop(delete=True)

    return asyncio.run(go())


def test_build_step_reaches_the_registries_but_not_the_hosts_loopback(tmp_path, host_listener):
    port, accepted = host_listener
    task = image_task(tmp_path, PROBE.format(port=port) + REGISTRIES)
    output = start_and_run(
        make_environment(task, tmp_path / "trial"),
        "cat /probe.txt; python3 -c 'import six; print(six.__version__)'; patch --version",
    )
    assert accepted == []
    assert "direct: refused" in output
    assert "proxied: refused" in output and "403" in output
    assert "1.17.0" in output
    assert "GNU patch" in output


def test_build_step_runs_under_the_sandboxs_seccomp_filter(tmp_path):
    task = image_task(
        tmp_path,
        "RUN { grep Seccomp: /proc/self/status; "
        "unshare --user true 2>/dev/null && echo unshared || echo refused; } > /filtered\n",
    )
    output = start_and_run(make_environment(task, tmp_path / "trial"), "cat /filtered")
    assert output.split() == ["Seccomp:", "2", "refused"]


@requires_cgroups
def test_build_step_past_the_memory_limit_fails_naming_it(tmp_path):
    task = image_task(
        tmp_path,
        "RUN python3 -c \"block = b'x' * (256 * 2**20); print(len(block))\"\n",
        environment_toml="memory_mb = 64\n",
    )
    with pytest.raises(MemoryLimitExceededError) as failed:
        start_and_run(make_environment(task, tmp_path / "trial"), "true")
    message = str(failed.value)
    assert "memory limit of 64 MB" in message
    assert "Dockerfile line 3" in message


@requires_cgroups
def test_build_step_past_the_pids_limit_fails_naming_it(tmp_path):
    task = image_task(
        tmp_path,
        "RUN python3 -c \"import subprocess; [subprocess.Popen(['sleep', '30']) "
        'for _ in range(64)]"\n',
    )
    with pytest.raises(TaskDefinitionError) as failed:
        start_and_run(make_environment(task, tmp_path / "trial", pids_max=32), "true")
    message = str(failed.value)
    assert "limit of 32 processes" in message
    assert "Dockerfile line 3" in message


@pytest.mark.skipif(not can_mount_sized_filesystem(), reason="cannot mount a sized filesystem")
@pytest.mark.parametrize(
    "steps",
    [
        "RUN head -c 100M /dev/zero > /big\n",
        # Split over steps, the writes share the one bound.
        "RUN head -c 40M /dev/zero > /first\nRUN head -c 40M /dev/zero > /second\n",
    ],
    ids=["one-step", "split-over-steps"],
)
def test_build_step_past_the_storage_bound_fails_naming_it(tmp_path, steps):
    task = image_task(tmp_path, steps, environment_toml="storage_mb = 64\n")
    with pytest.raises(TaskDefinitionError) as failed:
        start_and_run(make_environment(task, tmp_path / "trial"), "true")
    message = str(failed.value)
    assert "storage bound of 64 MB" in message
    assert f"Dockerfile line {steps.count('RUN') + 2}" in message
