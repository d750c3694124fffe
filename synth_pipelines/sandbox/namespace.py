"""The sandbox's namespaces: one long-lived bubblewrap init, and commands that join it.

bubblewrap creates the mount, pid, network, IPC, UTS and cgroup namespaces once, at
start, around a tiny init, inside the sandbox's user namespace (`userns.py`); every
command then joins them (`launcher.py`, forked by the sandbox's launch server), so files,
background processes and servers persist between commands the way they do across
`docker exec` calls. The init is pid 1 inside, so nothing inside can kill it, and it
reaps orphans. bwrap runs with
`--die-with-parent`: if the controlling process dies, the init dies, and with it every
process in the pid namespace.

Every process inside runs as an id of the sandbox's user namespace, without any
capability, with no_new_privs and the sandbox's seccomp filter (`seccomp.py`): the init
through bubblewrap (unprivileged, it drops every capability it held inside; `--seccomp`),
each command through the launcher.
The controller keeps a pidfd and the root directory of the init, which is how commands
find the sandbox: a pid alone could be recycled.
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

from synth_pipelines.sandbox.commands import Process, Start
from synth_pipelines.sandbox.errors import SandboxStartError
from synth_pipelines.sandbox.launch_server import LaunchServer
from synth_pipelines.sandbox.limits import kill_until_empty
from synth_pipelines.sandbox.namespace_owner import NamespaceOwner
from synth_pipelines.sandbox.userns import SETUP_ID, UserNamespace

HOST_TOOLS = ("bwrap", "unshare", "setpriv")
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
HOSTNAME = "sandbox"
READY = b"ready\n"
# pid 1 ignores the signals a shell would die of, reaps orphans (bash does for any
# child) and keeps a child alive so the namespace has a reason to exist.
INIT_SCRIPT = (
    "trap '' HUP INT QUIT TERM USR1 USR2 PIPE; echo ready; exec >/dev/null 2>&1 </dev/null; "
    "while :; do sleep 3600; done"
)
TERMINATE_DEADLINE_SEC = 10.0


def host_tools() -> dict[str, str]:
    """Absolute paths of the host programs the sandbox needs, or a clear error."""
    found = {name: shutil.which(name, path=SYSTEM_PATH) for name in HOST_TOOLS}
    missing = [name for name, path in found.items() if path is None]
    if missing:
        raise SandboxStartError(
            f"the local sandbox needs {', '.join(missing)} on the host "
            "(Debian/Ubuntu: apt-get install bubblewrap util-linux)"
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
    """The running init, the pidfd and root directory that identify it, the launch
    server that enters commands into it, and the host id that owns its user namespace,
    which it and bubblewrap run as (`namespace_owner.py`)."""

    process: asyncio.subprocess.Process
    pid: int
    pidfd: int
    root_fd: int
    launcher: LaunchServer
    owner: NamespaceOwner

    @classmethod
    async def launch(
        cls,
        bwrap_arguments: Sequence[str],
        procs_files: Sequence[Path],
        seccomp: bytes,
        *,
        pass_fds: Sequence[int] = (),
    ) -> SandboxInit:
        """Start the init, in a network namespace of its own (every sandbox's, an image
        build step's too). `pass_fds` are descriptors `bwrap_arguments` name (an image's
        root)."""
        tools = host_tools()
        owner = await asyncio.to_thread(NamespaceOwner.take)
        try:
            userns = await UserNamespace.create(tools["unshare"], owner.id)
        except BaseException:
            owner.release()
            raise
        program = _memory_file("sandbox-seccomp", seccomp)
        info_read, info_write = os.pipe()
        argv = _init_argv(tools, owner.id, userns.fd, program, info_write, bwrap_arguments)
        try:
            process = await asyncio.create_subprocess_exec(
                *join_cgroup(argv, procs_files),
                env={"PATH": SYSTEM_PATH},
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                pass_fds=(info_write, userns.fd, program, *pass_fds),
            )
        except BaseException:
            os.close(info_read)
            owner.release()
            raise
        finally:
            for descriptor in (info_write, program):
                os.close(descriptor)
            userns.close()
        try:
            pid, pidfd, root_fd, server = await _serve_once_ready(process, info_read)
        except BaseException:
            # The id may serve another sandbox only once nothing of this one runs: a
            # bubblewrap still running keeps it reserved until this process ends.
            if process.returncode is not None:
                owner.release()
            raise
        return cls(
            process=process,
            pid=pid,
            pidfd=pidfd,
            root_fd=root_fd,
            launcher=server,
            owner=owner,
        )

    def command(
        self,
        command: str,
        *,
        cwd: str,
        env: Mapping[str, str],
        uid: int,
        gid: int,
        procs_files: Sequence[Path],
        seccomp: bytes,
        build_step: bool = False,
        capabilities: Sequence[int] = (),
    ) -> Start:
        """How to start `command` with bash inside the sandbox, unprivileged and
        filtered; a `build_step` as root with its capabilities (`launcher.py`)."""
        spec = {
            "cgroup_procs": [str(path) for path in procs_files],
            "uid": uid,
            "gid": gid,
            "groups": [],
            "cwd": cwd,
            "env": dict(env),
            "command": command,
            "seccomp": seccomp,
            "build_step": build_step,
            "capabilities": list(capabilities),
        }

        async def start(stdin: int, stdout: int, stderr: int) -> Process:
            return await self.launcher.launch(spec, stdin, stdout, stderr)

        return start

    @property
    def running(self) -> bool:
        return self.process.returncode is None

    def kill_all_but_init(self) -> None:
        """SIGKILL every process of the sandbox but its init (pid 1 and the sleep it
        keeps), wherever it sits (any cgroup, any session, any user inside), until
        none is left.

        They are found by their pid namespace, which no process inside can leave, and
        the init's by their id, the sandbox's owner id, which no command may take
        (`userns.SETUP_ID`). A process
        forked while the list is read shows up in the next read, so the sandbox must
        read empty twice, a moment apart.
        """
        namespace = _pid_namespace(self.pid)
        kill_until_empty(
            lambda: [
                pid
                for pid in _host_pids()
                if _pid_namespace(pid) == namespace and _uid(pid) != self.owner.id
            ],
            lambda pids: f"processes {list(pids)} of the sandbox",
        )

    async def terminate(self) -> bool:
        """Kill pid 1 inside, which ends the pid namespace, then let bwrap reap it;
        False if that takes longer than `TERMINATE_DEADLINE_SEC`: the namespace ends
        only once every process in it has, and one stuck in the kernel may not.

        Killing bwrap itself would leave pid 1 to die of its parent-death signal and
        be reaped by whatever the host's init is, possibly never.

        The owner id is released once bubblewrap has ended (every process of the sandbox
        has, and with them what they held charged to it); one stuck keeps it reserved
        until this process ends.
        """
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
        try:
            async with asyncio.timeout(TERMINATE_DEADLINE_SEC):
                await self.process.wait()
        except TimeoutError:
            return False
        finally:
            await self.launcher.close()
            os.close(self.pidfd)
            os.close(self.root_fd)
        self.owner.release()
        return True


def _init_argv(
    tools: Mapping[str, str],
    owner: int,
    userns_fd: int,
    program: int,
    info_write: int,
    bwrap_arguments: Sequence[str],
) -> list[str]:
    """bubblewrap's command line, run as `owner` on the host, around the init."""
    return [
        # bubblewrap runs unprivileged on the host, as the sandbox's owner id, which
        # it sets the sandbox up as (userns.py); it joins the cgroup as root first
        # (join_cgroup).
        tools["setpriv"],
        f"--reuid={owner}",
        f"--regid={owner}",
        "--clear-groups",
        "--",
        tools["bwrap"],
        "--userns",
        str(userns_fd),
        "--uid",
        str(SETUP_ID),
        "--gid",
        str(SETUP_ID),
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
        "--seccomp",
        str(program),
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


def _host_pids() -> list[int]:
    return [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]


def _uid(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except FileNotFoundError:
        return None


def _pid_namespace(pid: int) -> tuple[int, int] | None:
    """The identity of `pid`'s pid namespace; None once it is gone, or for a host
    process closed even to root (no sandbox process can close itself to root, which
    holds CAP_SYS_PTRACE over every namespace below its own)."""
    try:
        found = os.stat(f"/proc/{pid}/ns/pid")
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return found.st_dev, found.st_ino


def _memory_file(name: str, content: bytes) -> int:
    """An anonymous file holding `content`, positioned at its start."""
    descriptor = os.memfd_create(name)
    os.write(descriptor, content)
    os.lseek(descriptor, 0, os.SEEK_SET)
    return descriptor


async def _serve_once_ready(
    process: asyncio.subprocess.Process, info_read: int
) -> tuple[int, int, int, LaunchServer]:
    """Once the init runs: its pid, pidfd and root directory, and its launch server."""
    try:
        pid = await _await_ready(process, info_read)
    finally:
        os.close(info_read)
    pidfd = os.pidfd_open(pid)
    root_fd = os.open(f"/proc/{pid}/root", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        server = await LaunchServer.start(pidfd, root_fd)
    except BaseException:
        os.close(pidfd)
        os.close(root_fd)
        raise
    return pid, pidfd, root_fd, server


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
