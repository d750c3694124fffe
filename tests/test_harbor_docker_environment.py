"""A plan's `environment.provider = "docker"` runs a task with Harbor's own docker
environment on the platform's Docker daemon (a real dockerd, installed from Debian by
`make setup`): Compose builds the task's Dockerfile from a base imported from the local
builder's, nothing is pulled, and what only Docker Hub's images could enforce is refused."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from pathlib import Path

import pytest
from harbor.models.task.config import NetworkMode, NetworkPolicy
from harbor.models.task.task import Task
from harbor.models.trial.paths import TrialPaths
from sandbox_support import isolated_state, run_trial

from synth_pipelines.config import Settings
from synth_pipelines.contracts.plan import EnvironmentChoice, ExecutionSettings
from synth_pipelines.runtime.docker_environment import (
    IMPORT_PATH,
    OfflineDockerEnvironment,
    UnsupportedTaskError,
    base_references,
)
from synth_pipelines.runtime.harbor_trials import environment_config
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


def docker_environment(task: Path, trial_dir: Path, **policies) -> OfflineDockerEnvironment:
    paths = TrialPaths(trial_dir)
    paths.mkdir()
    config = Settings()
    return OfflineDockerEnvironment(
        environment_dir=task / "environment",
        environment_name=task.name,
        session_id=f"{trial_dir.name}__env",
        trial_paths=paths,
        task_env_config=Task(task).config.environment,
        images_dir=config.images_dir,
        project_root=config.project_root,
        debian_mirror=config.debian_mirror,
        **policies,
    )


def test_the_docker_provider_selects_harbors_docker_environment():
    settings = ExecutionSettings(environment=EnvironmentChoice(provider="docker"))
    assert environment_config(settings, Settings()).import_path == IMPORT_PATH


def test_the_bases_of_a_multi_stage_dockerfile_skip_its_own_stages(tmp_path):
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(
        "FROM debian:bookworm AS tools\nRUN true\n"
        "FROM python:3.11-slim\nCOPY --from=tools /etc/hostname /x\n"
        "FROM tools\nFROM scratch\n"
    )
    assert base_references(dockerfile) == ["debian:bookworm", "python:3.11-slim"]


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
        docker_environment(TASK, tmp_path / "trial", **policies)
    message = str(refused.value)
    assert "\n" not in message and TASK.name in message and reason in message
    assert "Docker Hub" in message


@pytest.mark.slow
def test_a_base_no_builder_can_make_offline_is_refused_naming_it(tmp_path, dockerd):
    task = tmp_path / "ubuntu-task"
    shutil.copytree(TASK, task)
    (task / "environment" / "Dockerfile").write_text("FROM ubuntu:24.04\nRUN true\n")
    environment = docker_environment(task, tmp_path / "trial")
    with pytest.raises(UnsupportedTaskError) as refused:
        asyncio.run(environment.start(force_build=False))
    message = str(refused.value)
    assert "\n" not in message and "ubuntu:24.04" in message and "debian:bookworm" in message


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
