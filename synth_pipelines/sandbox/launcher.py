"""Run commands inside a running sandbox: unprivileged, filtered, each with only its own
environment. Standard library only: the controller starts this file once per sandbox with
its own interpreter (`python -I -S launcher.py SETUP`), as host root, and it then forks
once per command, so a command costs a fork instead of an interpreter start (about 20 ms
of CPU, and an attempt runs some twenty commands).

SETUP (marshalled, hex) names three descriptors it inherits: the sandbox init's pidfd and
root directory, and its end of a SOCK_SEQPACKET socket to the controller. Each request
on the socket is a request number with four descriptors: a file holding the command's
description (marshalled) and its stdin, stdout and stderr. The server answers twice per
request: STARTED with the host pid of the command's launcher process once it is forked,
and EXITED with that process's exit code once it has ended (negative: killed by that
signal, as `asyncio` reports it). It ends when the controller closes its end. It never
starts a thread: joining a user namespace needs a single-threaded process.

For each command, the forked launcher process, in a new session (so that the controller
can kill its group), with only its stdio and the init's two descriptors open:

1. joins the sandbox's pid namespace for its children, then forks: it stays on the
   host, waits and exits with the command's exit status (128 + N for death by signal
   N, as a shell does); the child is the command.
2. The child joins the command's leaf cgroup (its host `cgroup.procs` files), then the
   init's other namespaces at once through the init's pidfd
   (user, mount, network, IPC, UTS, cgroup) and takes the init's root directory, so
   a recycled pid can never stand in for the sandbox.
3. It takes the command's identity (no supplementary groups unless given), drops every
   capability (bounding, ambient, effective, permitted, inheritable), sets
   no_new_privs, installs the seccomp filter, changes to the working directory and
   executes `/bin/bash -c COMMAND` with exactly the given environment and a
   container's umask (022). Root on an image keeps the few capabilities given
   (`capabilities`: those over files, which in a user namespace reach only the
   sandbox's own). An image build's step (`build_step`) keeps root's capabilities in
   the sandbox's user namespace, under the same filter.

This is what `nsenter`, `setpriv` and `env -i` did before, plus the part none of them
can do: install the sandbox's seccomp filter. A filter bubblewrap installs covers only
its init's descendants, and a command entered from outside is not one of them.

A failure before the command starts exits with 126 (125 for a working directory that
does not exist, as `env -C` did) and a message on stderr.
"""

from __future__ import annotations

import contextlib
import ctypes
import marshal
import os
import select
import socket
import struct
import sys
from dataclasses import dataclass

# Only the type checker reads these: importing `typing` would cost every sandbox's
# launcher about 4 ms.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
SECCOMP_MODE_FILTER = 2
CAPABILITY_VERSION_3 = 0x20080522
NAMESPACES = (
    os.CLONE_NEWUSER
    | os.CLONE_NEWNS
    | os.CLONE_NEWNET
    | os.CLONE_NEWIPC
    | os.CLONE_NEWUTS
    | os.CLONE_NEWCGROUP
)
CANNOT_START = 126
NO_WORKDIR = 125
# A container's processes start with this mask (Docker's, and a login shell's), whatever
# the controller's: the platform's own files are owner-only (`state_locations.py`), and
# that mask must not reach what a command makes for the task's other users.
COMMAND_UMASK = 0o022
# Controller -> server: the request number (with the four descriptors). Server ->
# controller: request number, STARTED or EXITED, and the pid or the exit code.
REQUEST = struct.Struct("=I")
REPLY = struct.Struct("=IIi")
STARTED = 1
EXITED = 2
DESCRIPTORS_PER_REQUEST = 4


class _CapabilityHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapabilityData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


class _FilterProgram(ctypes.Structure):
    _fields_ = [("length", ctypes.c_ushort), ("instructions", ctypes.c_char_p)]


def _checked(result: int, what: str) -> None:
    if result != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"{what}: {os.strerror(error)}")


def _drop_bounding_set(libc: ctypes.CDLL, last_capability: int, keep: frozenset[int]) -> None:
    """Empty the bounding set but `keep`, so that no later exec (of root, or of a file
    with capabilities) can grant another; needs CAP_SETPCAP, so it runs before the uid
    changes."""
    for capability in range(last_capability + 1):
        if capability not in keep:
            _checked(libc.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0), "drop the bounding set")


def _clear_capabilities(libc: ctypes.CDLL, keep: frozenset[int]) -> None:
    """Leave only `keep` effective and permitted (none inheritable, none ambient); an
    exec by root then holds exactly those, an exec by any other id none."""
    _checked(libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "clear ambient caps")
    header = _CapabilityHeader(CAPABILITY_VERSION_3, 0)
    data = (_CapabilityData * 2)()
    for capability in keep:
        word, bit = divmod(capability, 32)
        data[word].effective |= 1 << bit
        data[word].permitted |= 1 << bit
    _checked(libc.capset(ctypes.byref(header), data), "set capabilities")


def _install_filter(libc: ctypes.CDLL, program: bytes) -> None:
    _checked(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "set no_new_privs")
    filter_program = _FilterProgram(len(program) // 8, program)
    _checked(
        libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(filter_program), 0, 0),
        "install the seccomp filter",
    )


@dataclass(frozen=True)
class _Host:
    """What every command needs from the host, read once by the server."""

    libc: ctypes.CDLL
    last_capability: int
    pidfd: int
    root_fd: int


def _become_command(host: _Host, spec: dict[str, Any]) -> None:
    libc = host.libc
    # Host paths: joined before the mount namespace changes ("0" is the writer itself).
    for procs in spec["cgroup_procs"]:
        with open(procs, "w") as joined:
            joined.write("0")
    os.setns(host.pidfd, NAMESPACES)
    os.fchdir(host.root_fd)
    os.chroot(".")
    os.close(host.pidfd)
    os.close(host.root_fd)
    os.setgroups(spec["groups"])
    os.setresgid(spec["gid"], spec["gid"], spec["gid"])
    if spec["build_step"]:
        # An image's RUN step is the task author's published code, run as root of the
        # sandbox's user namespace with that namespace's capabilities (apt changes
        # users and groups, chowns, chroots); no host id is mapped, so none of it
        # reaches beyond the sandbox's own files. See docs/sandbox.md. It runs under
        # the sandbox's filter like every process inside: none of what the filter
        # refuses is anything apt, dpkg, pip or npm needs.
        os.setresuid(spec["uid"], spec["uid"], spec["uid"])
        _install_filter(libc, spec["seccomp"])
        return
    keep = frozenset(spec["capabilities"])
    _drop_bounding_set(libc, host.last_capability, keep)
    os.setresuid(spec["uid"], spec["uid"], spec["uid"])
    _clear_capabilities(libc, keep)
    _install_filter(libc, spec["seccomp"])


def _run_command(host: _Host, spec: dict[str, Any]) -> None:
    try:
        _become_command(host, spec)
    except OSError as error:
        sys.stderr.write(f"sandbox launcher: could not enter the sandbox: {error}\n")
        os._exit(CANNOT_START)
    try:
        os.chdir(spec["cwd"])
    except OSError as error:
        sys.stderr.write(
            f"sandbox launcher: cannot change directory to {spec['cwd']!r}: {error.strerror}\n"
        )
        os._exit(NO_WORKDIR)
    os.umask(COMMAND_UMASK)
    try:
        os.execve("/bin/bash", ["/bin/bash", "-c", spec["command"]], spec["env"])
    except OSError as error:
        sys.stderr.write(f"sandbox launcher: cannot run /bin/bash: {error.strerror}\n")
    os._exit(CANNOT_START)


def _read_spec(descriptor: int) -> dict[str, Any]:
    chunks = []
    while chunk := os.read(descriptor, 1 << 16):
        chunks.append(chunk)
    os.close(descriptor)
    # marshal, not json: it is built in, where importing json costs ~10 ms.
    spec: dict[str, Any] = marshal.loads(b"".join(chunks))
    return spec


def _only_open(keep: set[int]) -> None:
    """Close every descriptor but `keep`: nothing of the server's (its socket, other
    commands' descriptors) may reach a command."""
    for name in os.listdir("/proc/self/fd"):
        descriptor = int(name)
        if descriptor not in keep:
            # The directory listing's own descriptor is closed by now.
            with contextlib.suppress(OSError):
                os.close(descriptor)


def _launch(host: _Host, descriptors: list[int]) -> None:
    """The forked launcher process of one command; never returns."""
    code = CANNOT_START
    try:
        spec_file, stdin, stdout, stderr = descriptors
        os.setsid()
        for target, source in enumerate((stdin, stdout, stderr)):
            os.dup2(source, target)
        _only_open({0, 1, 2, host.pidfd, host.root_fd, spec_file})
        spec = _read_spec(spec_file)
        os.setns(host.pidfd, os.CLONE_NEWPID)
        child = os.fork()
        if child == 0:
            _run_command(host, spec)
        os.close(host.pidfd)
        os.close(host.root_fd)
        _, status = os.waitpid(child, 0)
        code = 128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
    except BaseException as error:  # whatever happens, this process ends here
        with contextlib.suppress(OSError):
            os.write(2, f"sandbox launcher: could not start the command: {error}\n".encode())
    os._exit(code)


def serve(host: _Host, channel: socket.socket) -> None:
    running: dict[int, tuple[int, int]] = {}  # pidfd -> (request, pid)
    while True:
        watched: list[socket.socket | int] = [channel, *running]
        ready, _, _ = select.select(watched, [], [])
        for source in ready:
            if isinstance(source, socket.socket):  # the channel: a new request
                message, descriptors, _, _ = socket.recv_fds(
                    channel, REQUEST.size, DESCRIPTORS_PER_REQUEST
                )
                if not message:
                    return
                (request,) = REQUEST.unpack(message)
                pid = os.fork()
                if pid == 0:
                    _launch(host, descriptors)
                for descriptor in descriptors:
                    os.close(descriptor)
                running[os.pidfd_open(pid)] = (request, pid)
                channel.send(REPLY.pack(request, STARTED, pid))
            else:  # a command's pidfd: it has ended
                request, pid = running.pop(source)
                os.close(source)
                _, status = os.waitpid(pid, 0)
                channel.send(REPLY.pack(request, EXITED, os.waitstatus_to_exitcode(status)))


def main() -> None:
    setup = marshal.loads(bytes.fromhex(sys.argv[1]))
    with open("/proc/sys/kernel/cap_last_cap") as last:
        last_capability = int(last.read())
    host = _Host(
        libc=ctypes.CDLL(None, use_errno=True),
        last_capability=last_capability,
        pidfd=setup["pidfd"],
        root_fd=setup["root_fd"],
    )
    channel = socket.socket(fileno=setup["socket"])
    # When the controller is gone, its commands' launchers carry on without it.
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        serve(host, channel)


if __name__ == "__main__":
    main()
