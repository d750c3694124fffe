"""A plan's `environment.provider = "docker"` runs a task with Harbor's own docker
environment on the platform's Docker daemon (a real dockerd, installed from Debian by
`make setup`): the platform's isolated builder builds the task's Dockerfile, the daemon
runs the imported image and builds nothing, nothing is pulled, and what only Docker
Hub's images could enforce is refused."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from pathlib import Path

import pytest
from harbor.models.task.config import NetworkMode, NetworkPolicy
from sandbox_support import (
    PROBE,
    REGISTRIES,
    image_task,
    isolated_state,
    make_docker_environment,
    make_task,
    requires_cgroups,
    run_trial,
    start_and_run,
)

from synth_pipelines.config import Settings
from synth_pipelines.contracts.plan import EnvironmentChoice, ExecutionSettings
from synth_pipelines.runtime.docker_environment import (
    BUILT_REPOSITORY,
    IMPORT_PATH,
    UnsupportedTaskError,
)
from synth_pipelines.runtime.harbor_trials import environment_config
from synth_pipelines.sandbox.errors import MemoryLimitExceededError
from synth_pipelines.services.dockerd import DockerDaemon

REPOS = Path(__file__).resolve().parent.parent / "datasets" / "repos"
TASK = REPOS / "idna-domain-length"


@pytest.fixture(autouse=True)
def state_dir(tmp_path, monkeypatch):
    yield from isolated_state(tmp_path, monkeypatch)


@pytest.fixture(scope="module")
def dockerd():
    """The platform's daemon, stopped afterwards when these tests started it."""
    config = Settings()
    docker = DockerDaemon.of(config.images_dir, config.project_root)
    was_running = docker.running()
    docker.ensure()
    yield docker
    if not was_running:
        docker.stop()


def test_the_docker_provider_selects_harbors_docker_environment():
    settings = ExecutionSettings(environment=EnvironmentChoice(provider="docker"))
    assert environment_config(settings, Settings()).import_path == IMPORT_PATH


@pytest.mark.parametrize(
    ("policies", "reason"),
    [
        (
            {
                "network_policy": NetworkPolicy(
                    network_mode=NetworkMode.ALLOWLIST, allowed_hosts=["pypi.org"]
                )
            },
            "network mode allowlist",
        ),
        (
            {
                "network_policy": NetworkPolicy(network_mode=NetworkMode.PUBLIC),
                "phase_network_policies": [NetworkPolicy(network_mode=NetworkMode.NO_NETWORK)],
            },
            "changes between phases (no-network, public)",
        ),
    ],
)
def test_what_only_the_egress_sidecar_enforces_is_refused_before_anything_starts(
    tmp_path, policies, reason
):
    with pytest.raises(UnsupportedTaskError) as refused:
        make_docker_environment(TASK, tmp_path / "trial", **policies)
    message = str(refused.value)
    assert "\n" not in message and TASK.name in message and reason in message
    assert "Docker Hub" in message


def test_a_compose_service_the_daemon_would_build_is_refused_naming_it(tmp_path):
    task = tmp_path / "compose-build"
    shutil.copytree(TASK, task)
    (task / "environment" / "docker-compose.yaml").write_text(
        "services:\n  helper:\n    build:\n      context: ./helper\n"
    )
    with pytest.raises(UnsupportedTaskError) as refused:
        make_docker_environment(task, tmp_path / "trial")
    message = str(refused.value)
    assert "\n" not in message and "helper (docker-compose.yaml)" in message
    assert "host's network" in message


@pytest.mark.parametrize(
    ("dockerfile", "named"),
    [
        ("FROM ubuntu:24.04\nRUN true\n", "ubuntu:24.04"),
        (
            "FROM debian:bookworm AS tools\nRUN true\n"
            "FROM python:3.11-slim\nCOPY --from=tools /etc/hostname /x\n",
            "multi-stage",
        ),
    ],
    ids=["unknown-base", "multi-stage"],
)
def test_a_dockerfile_the_platforms_builder_cannot_build_is_refused_before_the_daemon(
    tmp_path, dockerfile, named
):
    task = tmp_path / "refused-task"
    shutil.copytree(TASK, task)
    (task / "environment" / "Dockerfile").write_text(dockerfile)
    environment = make_docker_environment(task, tmp_path / "trial")
    with pytest.raises(UnsupportedTaskError) as refused:
        asyncio.run(environment.start(force_build=False))
    message = str(refused.value)
    assert "\n" not in message and named in message
    assert "Harbor's docker environment" in message and "bwrap" not in message


# Before, Compose built the Dockerfile on the daemon, with `build.network: host`: a RUN
# step reached every service on the host's loopback, outside any cgroup and without the
# seccomp filter.
@pytest.mark.slow
def test_a_build_step_reaches_the_registries_but_not_the_hosts_loopback(
    tmp_path, dockerd, host_listener
):
    port, accepted = host_listener
    task = image_task(tmp_path, PROBE.format(port=port) + REGISTRIES)
    output = start_and_run(
        make_docker_environment(task, tmp_path / "trial"),
        "cat /probe.txt; python3 -c 'import six; print(six.__version__)'",
    )
    assert accepted == []
    assert "direct: refused" in output
    assert "proxied: refused" in output and "403" in output
    assert "1.17.0" in output


@pytest.mark.slow
@requires_cgroups
def test_a_build_step_past_the_memory_limit_fails_naming_it(tmp_path, dockerd):
    task = image_task(
        tmp_path,
        "RUN python3 -c \"block = b'x' * (256 * 2**20); print(len(block))\"\n",
        environment_toml="memory_mb = 64\n",
    )
    with pytest.raises(MemoryLimitExceededError) as failed:
        start_and_run(make_docker_environment(task, tmp_path / "trial"), "true")
    message = str(failed.value)
    assert "memory limit of 64 MB" in message and "Dockerfile line 3" in message


@pytest.mark.slow
def test_a_built_image_runs_with_its_dockerfiles_env_workdir_user_and_owners(tmp_path, dockerd):
    task = make_task(
        tmp_path,
        "docker-image-config",
        dockerfile=(
            "FROM python:3.11-slim\n"
            "RUN useradd --create-home --uid 1234 builder && mkdir /work && "
            "chown builder /work && rm -rf /usr/share/doc\n"
            "ENV PROBE='two words \"quoted\"'\n"
            "WORKDIR /work\nUSER builder\n"
        ),
    )
    environment = make_docker_environment(task, tmp_path / "trial")

    async def go() -> str:
        await environment.start(force_build=False)
        try:
            result = await environment.exec(
                'printf "%s|" "$PROBE" "$(pwd)" "$(id -un)" "$(stat -c %U /work)" '
                '"$(stat -c %U /etc/passwd)"; test -e /usr/share/doc && echo doc || echo no-doc'
            )
            return result.stdout or ""
        finally:
            await environment.stop(delete=True)

    output = asyncio.run(go())
    assert output.strip() == 'two words "quoted"|/work|builder|builder|root|no-doc'
    assert f"{BUILT_REPOSITORY}:" in environment.task_env_config.docker_image


@pytest.mark.slow
def test_a_repository_task_runs_in_harbors_docker_environment(tmp_path, dockerd):
    environment = environment_config(
        ExecutionSettings(environment=EnvironmentChoice(provider="docker")), Settings()
    )
    fixed = run_trial(TASK, tmp_path / "oracle", "oracle", environment=environment)
    assert fixed.exception_info is None, fixed.exception_info
    assert fixed.verifier_result is not None and fixed.verifier_result.rewards == {"reward": 1.0}
    untouched = run_trial(TASK, tmp_path / "nop", "nop", environment=environment)
    assert untouched.exception_info is None, untouched.exception_info
    assert untouched.verifier_result is not None
    assert untouched.verifier_result.rewards == {"reward": 0.0}
    # Nothing of the trials is left on the daemon: Harbor's stop(delete=True) ran.
    assert not dockerd_containers(dockerd)


def dockerd_containers(docker) -> list[str]:
    listed = subprocess.run(
        ["docker", "--host", docker.host, "ps", "-aq"], capture_output=True, text=True, check=True
    )
    return listed.stdout.split()
