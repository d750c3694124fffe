"""An image build's RUN steps run like attempts: no network but the package registries,
the sandbox's seccomp filter, the task's memory, pids and storage limits, and a breach
fails the build naming the limit.

Before, a RUN step ran in the host's network namespace, outside any cgroup and without
the seccomp filter: it reached services on the host's loopback, and used memory,
processes and disk past the task's limits.
"""

from __future__ import annotations

import pytest
from sandbox_support import (
    PROBE,
    REGISTRIES,
    image_task,
    isolated_state,
    make_environment,
    requires_cgroups,
    start_and_run,
)

from synth_pipelines.sandbox.errors import MemoryLimitExceededError, TaskDefinitionError
from synth_pipelines.sandbox.storage import can_mount_sized_filesystem


@pytest.fixture(autouse=True)
def state_dir(tmp_path, monkeypatch):
    yield from isolated_state(tmp_path, monkeypatch)


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
