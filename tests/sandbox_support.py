"""Tiny Harbor tasks and the environments (bwrap, Harbor's docker) built by the sandbox tests
themselves."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from harbor import Trial, TrialConfig
from harbor.models.task.config import NetworkMode, NetworkPolicy
from harbor.models.task.config import TaskConfig as TaskToml
from harbor.models.trial.config import AgentConfig, EnvironmentConfig, TaskConfig
from harbor.models.trial.paths import TrialPaths
from harbor.models.trial.result import TrialResult

from synth_pipelines.config import Settings
from synth_pipelines.runtime.docker_environment import OfflineDockerEnvironment
from synth_pipelines.sandbox.bwrap import BwrapEnvironment
from synth_pipelines.sandbox.limits import PARENT_NAME, detect_hierarchy
from synth_pipelines.sandbox.options import HostSettings, ImageCacheOptions
from synth_pipelines.sandbox.verification import isolate_verification

IMPORT_PATH = "synth_pipelines.sandbox.bwrap:BwrapEnvironment"
DOCKERFILE = "FROM python:3.12-slim\nWORKDIR /app\nCOPY seed.txt /app/\nENV GREETING=hello\n"
TASK_TOML = """\
schema_version = "1.4"
artifacts = ["/app/hello.txt"]

[task]
name = "synth/{name}"

[agent]
timeout_sec = 60

[verifier]
environment_mode = "{verifier_mode}"
timeout_sec = 60
{extra}
"""
SOLVE_SH = '#!/bin/bash\necho "$GREETING" > /app/hello.txt\n'
TEST_SH = """\
#!/bin/bash
if [ "$(cat /app/hello.txt 2>/dev/null)" = hello ]; then echo 1; else echo 0; fi \\
  > /logs/verifier/reward.txt
"""

PROBE_BASE = "python:3.11-slim"
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


requires_cgroups = pytest.mark.skipif(
    detect_hierarchy() is None, reason="no writable cgroup hierarchy on this host"
)


def make_task(
    root: Path,
    name: str = "sandbox-probe",
    *,
    dockerfile: str = DOCKERFILE,
    extra_toml: str = "",
    solve_sh: str = SOLVE_SH,
    test_sh: str = TEST_SH,
    verifier_mode: str = "separate",
) -> Path:
    """A task (separate verifier unless asked) whose oracle writes /app/hello.txt and
    whose test checks it."""
    task = root / name
    for folder in ("environment", "tests", "solution"):
        (task / folder).mkdir(parents=True)
    (task / "task.toml").write_text(
        TASK_TOML.format(name=name, extra=extra_toml, verifier_mode=verifier_mode)
    )
    (task / "instruction.md").write_text("Write hello into /app/hello.txt.\n")
    (task / "environment" / "Dockerfile").write_text(dockerfile)
    (task / "environment" / "seed.txt").write_text("seed\n")
    (task / "solution" / "solve.sh").write_text(solve_sh)
    (task / "tests" / "test.sh").write_text(test_sh)
    return task


def host_settings() -> HostSettings:
    """This host's sandbox places, read from the environment as a process edge reads them."""
    return HostSettings.model_validate(Settings(), from_attributes=True)


def make_environment(task: Path, trial_dir: Path, **overrides) -> BwrapEnvironment:
    """The environment Harbor would build for the task, constructed directly."""
    config = TaskToml.model_validate_toml((task / "task.toml").read_text())
    paths = TrialPaths(trial_dir)
    paths.mkdir()
    options = {
        "network_policy": NetworkPolicy(network_mode=NetworkMode.NO_NETWORK),
        **host_settings().model_dump(),
        **overrides,
    }
    return BwrapEnvironment(
        environment_dir=task / "environment",
        environment_name=task.name,
        session_id=f"{task.name}__env",
        trial_paths=paths,
        task_env_config=config.environment,
        **options,
    )


def make_docker_environment(task: Path, trial_dir: Path, **policies) -> OfflineDockerEnvironment:
    """Harbor's docker environment on the platform's daemon, as the `docker` provider
    constructs it (`runtime/harbor_trials.py`)."""
    config = TaskToml.model_validate_toml((task / "task.toml").read_text())
    paths = TrialPaths(trial_dir)
    paths.mkdir()
    settings = Settings()
    return OfflineDockerEnvironment(
        environment_dir=task / "environment",
        environment_name=task.name,
        session_id=f"{trial_dir.name}__env",
        trial_paths=paths,
        task_env_config=config.environment,
        project_root=settings.project_root,
        **ImageCacheOptions.model_validate(settings, from_attributes=True).model_dump(),
        **policies,
    )


def sandbox_dirs() -> list[Path]:
    root = Settings().sandboxes_dir
    return sorted(root.iterdir()) if root.is_dir() else []


def sandbox_cgroups(name: str) -> list[Path]:
    hierarchy = detect_hierarchy()
    if hierarchy is None:
        return []
    return [
        path
        for mount in set(hierarchy.mounts.values())
        if (path := mount / PARENT_NAME / name).exists()
    ]


def run_trial(
    task: Path,
    trials_dir: Path,
    agent: str,
    environment: EnvironmentConfig | None = None,
    **config,
) -> TrialResult:
    """A Harbor trial on the sandbox (or `environment`), as the platform runs one
    (`runtime/harbor_trials.py`)."""
    sandbox = EnvironmentConfig(
        import_path=IMPORT_PATH, kwargs=host_settings().model_dump(mode="json")
    )
    trial_config = TrialConfig(
        task=TaskConfig(path=task),
        trials_dir=trials_dir,
        agent=AgentConfig(name=agent),
        environment=environment or sandbox,
        **config,
    )

    async def run() -> TrialResult:
        trial = await Trial.create(trial_config)
        isolate_verification(trial)
        return await trial.run()

    return asyncio.run(run())


def isolated_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Point the platform's state (and so the sandboxes' directories) at a temp dir.

    Used as `yield from` in each test module's autouse fixture.
    """
    monkeypatch.setenv("SYNTH_DATA_DIR", str(tmp_path / "state"))
    yield tmp_path / "state"


def wait_for[T](condition: Callable[[], T], timeout: float = 30.0) -> T:
    """The first true value of `condition`, polled until `timeout`."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)
    return value


def processes_with(marker: str) -> dict[int, bytes]:
    """Host processes whose command line holds `marker`, with that command line."""
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if marker.encode() in cmdline:
                found[int(entry.name)] = cmdline
    return found


def wait_for_processes(marker: str, count: int, timeout: float = 30.0) -> list[int]:
    """The `count` processes that `exec -a {marker}...` named, once they exist: a command
    backgrounded with `&` inside a sandbox may not have exec'd when the shell that started
    it returns, so one read of /proc right after can find nothing, or only the shell."""

    def named() -> list[int]:
        found = [
            pid
            for pid, cmdline in processes_with(marker).items()
            if cmdline.startswith(marker.encode())
        ]
        return sorted(found) if len(found) >= count else []

    return wait_for(named, timeout)


def image_task(root: Path, steps: str, *, environment_toml: str = "") -> Path:
    """A task whose image starts from a nonce step, so its layers are new to any cache
    (the base, the expensive part, is shared)."""
    dockerfile = f"FROM {PROBE_BASE}\nRUN echo {secrets.token_hex(8)} > /nonce\n{steps}"
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
