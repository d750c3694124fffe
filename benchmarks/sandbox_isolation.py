"""What the sandbox's isolation costs: a sandbox start and a command, before and after.

One run on this host measures both paths, interleaved, on the same task and the same
layout of host directories and cgroups:

- previous: bubblewrap run as root in the host's user namespace, binding the sandbox's
  directories itself, and every command entered through `nsenter`, `setpriv` and
  `env -i` (reproduced here exactly as it was);
- current: `BwrapEnvironment` as it is (the user namespace made by a helper and handed
  to bubblewrap, the seccomp filter, the sandbox's directories attached from the host,
  every command entered by a launcher process the sandbox's launch server forks).

A start is the environment's `start()` (lay down the task's files, make the cgroup,
start the init and its launch server, create Harbor's directories with one command) and
`stop()`; a command
is `exec("true")` in a started sandbox (a leaf cgroup made and removed around it, as
always). Prints medians, their ratio and the difference. Needs root and bubblewrap.

    .venv/bin/python -m benchmarks.sandbox_isolation [--starts 20] [--execs 100]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path

from harbor.models.task.config import NetworkMode, NetworkPolicy
from harbor.models.task.task import Task
from harbor.models.trial.paths import TrialPaths

from benchmarks.trivial_tasks import write_task
from synth_pipelines.config import Settings
from synth_pipelines.sandbox.bwrap import BwrapEnvironment
from synth_pipelines.sandbox.commands import run_to_completion, spawned
from synth_pipelines.sandbox.filesystem import ETC_ENTRIES, HOST_SYSTEM_DIRS
from synth_pipelines.sandbox.namespace import (
    HOSTNAME,
    INIT_SCRIPT,
    READY,
    SYSTEM_PATH,
    join_cgroup,
)
from synth_pipelines.sandbox.options import HostSettings
from synth_pipelines.sandbox.seccomp import filter_program


class PreviousPath:
    """The sandbox as it was started and entered before it had a user namespace."""

    def __init__(self, environment: BwrapEnvironment):
        self.environment = environment
        self.process: asyncio.subprocess.Process | None = None
        self.pid = 0
        self.exec_numbers = iter(range(1, 1 << 30))

    def bwrap_arguments(self) -> list[str]:
        filesystem = self.environment._root.filesystem
        arguments: list[str] = []
        for name in HOST_SYSTEM_DIRS:
            arguments += _host_entry(Path("/") / name)
        for name in ETC_ENTRIES:
            arguments += _host_entry(Path("/etc") / name)
        arguments += ["--proc", "/proc", "--dev", "/dev"]
        for top in filesystem.writable_tops:
            arguments += ["--bind", str(filesystem.host_dir(top)), f"/{top}"]
        return [*arguments, "--remount-ro", "/"]

    async def start(self) -> None:
        environment = self.environment
        await asyncio.to_thread(environment._lay_down)
        # Root inside owned the files then (and had no capability to write others').
        await asyncio.to_thread(_own_by_host_root, environment._root.filesystem.writable_root)
        procs = await asyncio.to_thread(environment._create_cgroup)
        info_read, info_write = os.pipe()
        argv = [
            shutil.which("bwrap"),
            *self.bwrap_arguments(),
            *("--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts"),
            *("--unshare-cgroup-try", "--hostname", HOSTNAME, "--die-with-parent"),
            *("--new-session", "--cap-drop", "ALL", "--clearenv", "--setenv", "PATH"),
            *(SYSTEM_PATH, "--chdir", "/", "--as-pid-1", "--info-fd", str(info_write)),
            *("--", "/bin/bash", "-c", INIT_SCRIPT),
        ]
        self.process = await asyncio.create_subprocess_exec(
            *join_cgroup(argv, procs),
            env={"PATH": SYSTEM_PATH},
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            pass_fds=(info_write,),
        )
        os.close(info_write)
        assert await self.process.stdout.readline() == READY
        self.pid = json.loads(os.read(info_read, 4096))["child-pid"]
        os.close(info_read)
        paths = " ".join(str(path) for path in environment._mount_targets(writable_only=True))
        await self.exec(f"mkdir -p {paths} && chmod 777 {paths}")

    async def exec(self, command: str) -> None:
        cgroup = self.environment._cgroup
        leaf = f"exec-{next(self.exec_numbers):06d}"
        procs = cgroup.new_leaf(leaf)
        argv = [
            *(shutil.which("nsenter"), f"--target={self.pid}", "--mount", "--uts", "--ipc"),
            *("--net", "--pid", "--cgroup", "--root", "--", shutil.which("setpriv")),
            *("--inh-caps=-all", "--ambient-caps=-all", "--bounding-set=-all"),
            *("--no-new-privs", "--", shutil.which("env"), "-i", "-C", "/"),
            *("HOME=/root", "LANG=C.UTF-8", "/bin/bash", "-c", command),
        ]

        async def kill(_process: asyncio.subprocess.Process) -> None:
            await asyncio.to_thread(cgroup.kill, leaf)

        try:
            completed = await run_to_completion(
                spawned(join_cgroup(argv, procs), env={"PATH": SYSTEM_PATH}),
                timeout_sec=60,
                kill=kill,
            )
        finally:
            cgroup.remove_leaf(leaf)
        assert completed.return_code == 0, completed.stderr

    async def stop(self) -> None:
        environment = self.environment
        cgroup = environment._cgroup
        await asyncio.to_thread(cgroup.kill_commands)
        os.kill(self.pid, 9)
        await self.process.wait()
        await asyncio.to_thread(cgroup.remove)
        environment._cgroup = None
        if environment._storage is not None:
            await asyncio.to_thread(environment._storage.unmount)
        await asyncio.to_thread(environment._root.filesystem.remove)
        environment._lease.release()


def _own_by_host_root(root: Path) -> None:
    for directory, subdirectories, files in os.walk(root):
        for name in [".", *subdirectories, *files]:
            os.chown(Path(directory, name), 0, 0, follow_symlinks=False)


def environment(task: Path, trial_dir: Path) -> BwrapEnvironment:
    """The environment Harbor would build for the task (as the sandbox tests build it)."""
    paths = TrialPaths(trial_dir)
    paths.mkdir()
    return BwrapEnvironment(
        environment_dir=task / "environment",
        environment_name=task.name,
        session_id=f"{trial_dir.name}__env",
        trial_paths=paths,
        task_env_config=Task(task).config.environment,
        network_policy=NetworkPolicy(network_mode=NetworkMode.NO_NETWORK),
        **HostSettings.model_validate(Settings(), from_attributes=True).model_dump(),
    )


def _host_entry(path: Path) -> list[str]:
    if path.is_symlink():
        return ["--symlink", os.readlink(path), str(path)]
    return ["--ro-bind", str(path), str(path)] if path.exists() else []


async def timed(step: Callable[[], Awaitable[object]]) -> float:
    started = time.perf_counter()
    await step()
    return time.perf_counter() - started


async def measure(task: Path, root: Path, starts: int, execs: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {
        key: [] for key in ("start_old", "start_new", "exec_old", "exec_new")
    }
    for index in range(starts):
        old = PreviousPath(environment(task, root / f"old-{index}"))
        new = environment(task, root / f"new-{index}")
        times["start_old"].append(await timed(partial(_start_stop_old, old)))
        times["start_new"].append(await timed(partial(_start_stop_new, new)))
    old = PreviousPath(environment(task, root / "old-exec"))
    new = environment(task, root / "new-exec")
    await old.start()
    await new.start(force_build=False)
    try:
        for _ in range(execs):
            times["exec_old"].append(await timed(partial(old.exec, "true")))
            times["exec_new"].append(await timed(partial(new.exec, "true")))
    finally:
        await old.stop()
        await new.stop(delete=True)
    return times


async def _start_stop_old(sandbox: PreviousPath) -> None:
    await sandbox.start()
    await sandbox.stop()


async def _start_stop_new(sandbox: BwrapEnvironment) -> None:
    await sandbox.start(force_build=False)
    await sandbox.stop(delete=True)


def report(times: dict[str, list[float]]) -> None:
    for what in ("start", "exec"):
        old = statistics.median(times[f"{what}_old"]) * 1000
        new = statistics.median(times[f"{what}_new"]) * 1000
        print(
            f"{what:5}  previous {old:8.1f} ms  current {new:8.1f} ms  "
            f"added {new - old:+7.1f} ms  ratio {new / old:5.2f}  "
            f"(medians of {len(times[f'{what}_old'])})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=20)
    parser.add_argument("--execs", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sandbox-isolation-") as scratch:
        root = Path(scratch)
        os.environ["SYNTH_DATA_DIR"] = str(root / "state")
        task = write_task(root / "tasks", 0)
        built = time.perf_counter()
        filter_program()
        built_ms = (time.perf_counter() - built) * 1000
        print(f"seccomp filter: built once per process, {built_ms:.1f} ms")
        report(asyncio.run(measure(task, root, args.starts, args.execs)))


if __name__ == "__main__":
    main()
