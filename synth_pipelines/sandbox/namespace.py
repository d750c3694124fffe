"""The sandbox's namespaces: one long-lived bubblewrap init, and commands that join it.

bubblewrap creates the mount, pid, network, IPC, UTS and cgroup namespaces once, at
start, around a tiny init; every command then joins them with `nsenter`, so files,
background processes and servers persist between commands the way they do across
`docker exec` calls. The init is pid 1 inside, so nothing inside can kill it, and
it reaps orphans. bwrap runs with `--die-with-parent`: if the controlling process
dies, the init dies, and with it every process in the pid namespace.

bwrap invoked by root keeps every capability unless told otherwise, and `nsenter`
hands its caller's capabilities on, so both paths drop them all (`--cap-drop ALL`,
then `setpriv` clearing the bounding, inheritable and ambient sets with
`no_new_privs`): root inside owns its files and nothing else.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shlex
import shutil
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from synth_pipelines.sandbox.errors import SandboxStartError

HOST_TOOLS = ("bwrap", "nsenter", "setpriv", "env")
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
HOSTNAME = "sandbox"
READY = b"ready\n"
# pid 1 ignores the signals a shell would die of, reaps orphans (bash does for any
# child) and keeps a child alive so the namespace has a reason to exist.
INIT_SCRIPT = (
    "trap '' HUP INT QUIT TERM USR1 USR2 PIPE; echo ready; exec >/dev/null 2>&1 </dev/null; "
    "while :; do sleep 3600; done"
)


def host_tools() -> dict[str, str]:
    """Absolute paths of the host programs the sandbox needs, or a clear error."""
    found = {name: shutil.which(name, path=SYSTEM_PATH) for name in HOST_TOOLS}
    missing = [name for name, path in found.items() if path is None]
    if missing:
        raise SandboxStartError(
            f"the local sandbox needs {', '.join(missing)} on the host "
            "(Debian/Ubuntu: apt-get install bubblewrap util-linux coreutils)"
        )
    return {name: path for name, path in found.items() if path is not None}


def join_cgroup(argv: Sequence[str], procs_files: Sequence[Path]) -> list[str]:
    """Wrap `argv` so its process enters the cgroup before it can fork anything."""
    if not procs_files:
        return list(argv)
    writes = " && ".join(f"echo $$ > {shlex.quote(str(path))}" for path in procs_files)
    return ["/bin/sh", "-c", f'{writes} && exec "$@"', "sandbox", *argv]


@dataclass
class SandboxInit:
    """The running init; its host pid is how commands find the namespaces."""

    process: asyncio.subprocess.Process
    pid: int
    tools: dict[str, str]

    @classmethod
    async def launch(
        cls, bwrap_arguments: Sequence[str], procs_files: Sequence[Path]
    ) -> SandboxInit:
        tools = host_tools()
        info_read, info_write = os.pipe()
        argv = [
            tools["bwrap"],
            *bwrap_arguments,
            "--unshare-ipc",
            "--unshare-pid",
            "--unshare-net",
            "--unshare-uts",
            "--unshare-cgroup-try",
            "--hostname",
            HOSTNAME,
            "--die-with-parent",
            "--new-session",
            "--cap-drop",
            "ALL",
            "--clearenv",
            "--setenv",
            "PATH",
            SYSTEM_PATH,
            "--chdir",
            "/",
            "--as-pid-1",
            "--info-fd",
            str(info_write),
            "--",
            "/bin/bash",
            "-c",
            INIT_SCRIPT,
        ]
        try:
            process = await asyncio.create_subprocess_exec(
                *join_cgroup(argv, procs_files),
                env={"PATH": SYSTEM_PATH},
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                pass_fds=(info_write,),
            )
        finally:
            os.close(info_write)
        try:
            pid = await _await_ready(process, info_read)
        finally:
            os.close(info_read)
        return cls(process=process, pid=pid, tools=tools)

    def enter(
        self,
        command: str,
        *,
        cwd: str,
        env: Mapping[str, str],
        uid: int,
        gid: int,
    ) -> list[str]:
        """argv that runs `command` with bash inside the sandbox, without privileges."""
        identity = [] if uid == 0 else [f"--reuid={uid}", f"--regid={gid}", "--clear-groups"]
        return [
            self.tools["nsenter"],
            f"--target={self.pid}",
            "--mount",
            "--uts",
            "--ipc",
            "--net",
            "--pid",
            "--cgroup",
            "--root",
            "--",
            self.tools["setpriv"],
            *identity,
            "--inh-caps=-all",
            "--ambient-caps=-all",
            "--bounding-set=-all",
            "--no-new-privs",
            "--",
            self.tools["env"],
            "-i",
            "-C",
            cwd,
            *(f"{name}={value}" for name, value in env.items()),
            "/bin/bash",
            "-c",
            command,
        ]

    @property
    def running(self) -> bool:
        return self.process.returncode is None

    async def terminate(self) -> None:
        """Kill pid 1 inside, which ends the pid namespace, then let bwrap reap it.

        Killing bwrap itself would leave pid 1 to die of its parent-death signal and
        be reaped by whatever the host's init is, possibly never.
        """
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
        await self.process.wait()


async def _await_ready(process: asyncio.subprocess.Process, info_read: int) -> int:
    stdout, stderr = process.stdout, process.stderr
    if stdout is None or stderr is None:
        raise SandboxStartError("bubblewrap was started without its output pipes")
    if await stdout.readline() != READY:
        await process.wait()
        error = (await stderr.read()).decode(errors="replace").strip()
        raise SandboxStartError(
            f"bubblewrap could not create the sandbox (exit {process.returncode}): "
            f"{error or 'no message'}"
        )
    # bwrap writes the info before it runs the init, so it is complete by now.
    info = b""
    while chunk := os.read(info_read, 4096):
        info += chunk
        try:
            return int(json.loads(info)["child-pid"])
        except ValueError:
            continue
    raise SandboxStartError(f"bubblewrap reported no sandbox pid: {info!r}")
