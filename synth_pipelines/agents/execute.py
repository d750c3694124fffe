"""Carrying out a launch in a Harbor environment: files, setup, the harness, outputs."""

from __future__ import annotations

import shlex
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from harbor.environments.base import BaseEnvironment

from synth_pipelines.agents.launch import Launch


class LaunchFailedError(RuntimeError):
    """The harness could not be prepared (a supplied file or a setup command failed)."""


@dataclass(frozen=True)
class LaunchResult:
    exit_code: int
    missing_outputs: tuple[str, ...]
    duration_sec: float


async def _write_files(environment: BaseEnvironment, launch: Launch) -> None:
    directories = sorted(
        {
            str(PurePosixPath(path).parent)
            for path in (launch.log_path, *(f.path for f in launch.files))
        }
    )
    if directories:
        made = await environment.exec(
            "mkdir -p " + " ".join(shlex.quote(d) for d in directories), user="root"
        )
        if made.return_code != 0:
            raise LaunchFailedError(f"could not create {directories}: {made.stderr}")
    with tempfile.TemporaryDirectory(prefix="synth-launch-") as scratch:
        for number, supplied in enumerate(launch.files):
            source = Path(scratch) / str(number)
            source.write_text(supplied.content)
            # An upload keeps the host file's mode, and this process's umask is owner-only
            # (`state_locations.py`): the agent may run as another user than root inside.
            source.chmod(0o644)
            await environment.upload_file(source, supplied.path)
            if supplied.executable:
                await environment.exec(f"chmod +x {shlex.quote(supplied.path)}", user="root")


async def execute_launch(
    environment: BaseEnvironment, launch: Launch, *, timeout_sec: float | None
) -> LaunchResult:
    started = time.monotonic()
    env = dict(launch.env)
    await _write_files(environment, launch)
    for command in launch.setup:
        done = await environment.exec(command, cwd=launch.workdir, env=env)
        if done.return_code != 0:
            raise LaunchFailedError(
                f"setup command {command!r} exited with {done.return_code}: "
                f"{(done.stderr or done.stdout or '').strip()[-500:]}"
            )
    ran = await environment.exec(
        launch.command(),
        cwd=launch.workdir,
        env=env,
        timeout_sec=int(timeout_sec) if timeout_sec else None,
    )
    missing = []
    for path in launch.required_outputs:
        found = await environment.exec(f"test -e {shlex.quote(path)}")
        if found.return_code != 0:
            missing.append(path)
    return LaunchResult(ran.return_code, tuple(missing), time.monotonic() - started)
