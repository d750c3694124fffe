"""Run one command inside a running sandbox: unprivileged, filtered, with only its own
environment. Standard library only: the controller runs this file with its own
interpreter (`python -I -S launcher.py SPEC`), as host root, once per command.

SPEC is the command's description, marshalled (the same interpreter writes and reads it).
What `nsenter`, `setpriv` and `env -i` did before, plus the part none of them can do:
install the sandbox's seccomp filter. A filter bubblewrap installs covers only its
init's descendants, and a command entered from outside is not one of them.

1. The process joins the command's leaf cgroup (its host `cgroup.procs` files) and
   the sandbox's pid namespace for its children, then forks: the parent stays on the
   host, waits and reports the command's exit status (128 + N for death by signal N,
   as a shell does); the child is the command.
2. The child joins the init's other namespaces at once through the init's pidfd
   (user, mount, network, IPC, UTS, cgroup) and takes the init's root directory, so
   a recycled pid can never stand in for the sandbox.
3. It takes the command's identity (no supplementary groups unless given), drops every
   capability (bounding, ambient, effective, permitted, inheritable), sets
   no_new_privs, installs the seccomp filter, changes to the working directory and
   executes `/bin/bash -c COMMAND` with exactly the given environment.

A failure before the command starts exits with 126 (125 for a working directory that
does not exist, as `env -C` did) and a message on stderr.
"""

from __future__ import annotations

import ctypes
import marshal
import os
import sys

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


def _drop_bounding_set(libc: ctypes.CDLL, last_capability: int) -> None:
    """Empty the bounding set, so that no later exec (of root, or of a file with
    capabilities) can grant one; needs CAP_SETPCAP, so it runs before the uid changes."""
    for capability in range(last_capability + 1):
        _checked(libc.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0), "drop the bounding set")


def _clear_capabilities(libc: ctypes.CDLL) -> None:
    _checked(libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "clear ambient caps")
    header = _CapabilityHeader(CAPABILITY_VERSION_3, 0)
    _checked(libc.capset(ctypes.byref(header), (_CapabilityData * 2)()), "clear capabilities")


def _install_filter(libc: ctypes.CDLL, program: bytes) -> None:
    _checked(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "set no_new_privs")
    filter_program = _FilterProgram(len(program) // 8, program)
    _checked(
        libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(filter_program), 0, 0),
        "install the seccomp filter",
    )


def _become_command(spec: dict) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    with open("/proc/sys/kernel/cap_last_cap") as last:
        last_capability = int(last.read())
    # Host paths: joined before the mount namespace changes ("0" is the writer itself).
    for procs in spec["cgroup_procs"]:
        with open(procs, "w") as joined:
            joined.write("0")
    os.setns(spec["pidfd"], NAMESPACES)
    os.fchdir(spec["root_fd"])
    os.chroot(".")
    os.close(spec["pidfd"])
    os.close(spec["root_fd"])
    os.setgroups(spec["groups"])
    os.setresgid(spec["gid"], spec["gid"], spec["gid"])
    _drop_bounding_set(libc, last_capability)
    os.setresuid(spec["uid"], spec["uid"], spec["uid"])
    _clear_capabilities(libc)
    _install_filter(libc, spec["seccomp"])


def _run_command(spec: dict) -> None:
    try:
        _become_command(spec)
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
    try:
        os.execve("/bin/bash", ["/bin/bash", "-c", spec["command"]], spec["env"])
    except OSError as error:
        sys.stderr.write(f"sandbox launcher: cannot run /bin/bash: {error.strerror}\n")
    os._exit(CANNOT_START)


def main() -> None:
    # marshal, not json: it is built in, where importing json costs ~10 ms per command.
    spec = marshal.loads(bytes.fromhex(sys.argv[1]))
    os.setns(spec["pidfd"], os.CLONE_NEWPID)
    child = os.fork()
    if child == 0:
        _run_command(spec)
    os.close(spec["pidfd"])
    os.close(spec["root_fd"])
    _, status = os.waitpid(child, 0)
    if os.WIFSIGNALED(status):
        sys.exit(128 + os.WTERMSIG(status))
    sys.exit(os.WEXITSTATUS(status))


if __name__ == "__main__":
    main()
