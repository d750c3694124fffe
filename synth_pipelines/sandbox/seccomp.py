"""The system calls no sandboxed process may make: one seccomp filter for the whole sandbox.

The filter is built once per process with libseccomp (the library systemd, Docker and
Podman use, so syscall numbers come from it, per architecture) and exported as a
classic BPF program. bubblewrap installs it on the sandbox's init (`--seccomp`), and
the launcher installs it on every command entered into the sandbox (`launcher.py`),
so every process inside runs under it and inherits it; no_new_privs is set first, as
the kernel requires of a process without CAP_SYS_ADMIN.

The default is to allow: the list is what a task never needs and what reaches kernel
state shared with the host or other sandboxes. Denied calls fail with EPERM, except
`clone3`, which fails with ENOSYS: its flags sit in a struct a filter cannot read, and
ENOSYS makes the C library fall back to `clone`, whose flags the filter does check.
A system call of another ABI (i386 through `int 0x80`, x32) kills the process: the
filter only knows this machine's native numbers.
"""

from __future__ import annotations

import ctypes
import errno
import os
from collections.abc import Mapping
from functools import cache

from synth_pipelines.sandbox.errors import SandboxStartError

DENIED: Mapping[str, str] = {
    "add_key": "kernel keyrings are shared with the host and outlive the sandbox",
    "keyctl": "kernel keyrings are shared with the host and outlive the sandbox",
    "request_key": "kernel keyrings are shared with the host and outlive the sandbox",
    "kexec_load": "replaces the running kernel",
    "kexec_file_load": "replaces the running kernel",
    "init_module": "loads code into the host's kernel",
    "finit_module": "loads code into the host's kernel",
    "delete_module": "unloads the host's kernel modules",
    "bpf": "loads programs into the host's kernel",
    "perf_event_open": "observes the host's kernel and other processes",
    "userfaultfd": "a common tool for stretching kernel race windows in exploits",
    "mount": "changes mounts (cgroup, proc and sysfs among them)",
    "umount2": "changes mounts",
    "pivot_root": "changes mounts",
    "move_mount": "changes mounts",
    "open_tree": "changes mounts",
    "fsopen": "creates filesystems to mount",
    "fsconfig": "creates filesystems to mount",
    "fsmount": "creates filesystems to mount",
    "fspick": "reconfigures mounted filesystems",
    "mount_setattr": "changes mounts",
    "setns": "joins other namespaces",
    "open_by_handle_at": "opens files by handle, around the mount view",
    "acct": "writes process accounting to a host file",
    "swapon": "changes the host's swap",
    "swapoff": "changes the host's swap",
    "reboot": "reboots the host",
}
"""Denied outright (EPERM), with the reason; docs/sandbox.md lists the same."""

NAMESPACE_FLAGS: Mapping[str, int] = {
    "CLONE_NEWNS": 0x00020000,
    "CLONE_NEWCGROUP": 0x02000000,
    "CLONE_NEWUTS": 0x04000000,
    "CLONE_NEWIPC": 0x08000000,
    "CLONE_NEWUSER": 0x10000000,
    "CLONE_NEWPID": 0x20000000,
    "CLONE_NEWNET": 0x40000000,
}
"""Flags that make new namespaces: refused (EPERM) to `clone` and `unshare`. A new user
namespace would hand its creator every capability inside it (and with it mount,
cgroupfs and the means to block teardown); the others need a capability the sandbox
does not have, and are refused here as well so that the rule does not depend on it."""
CLONE_NEWTIME = 0x00000080
"""`unshare` only: in `clone`'s flags these bits are the exit signal."""

SCMP_ACT_ALLOW = 0x7FFF0000
SCMP_ACT_KILL_PROCESS = 0x80000000
SCMP_FLTATR_ACT_BADARCH = 2
SCMP_CMP_MASKED_EQ = 7
NR_SCMP_ERROR = -1


def _errno_action(code: int) -> int:
    return 0x00050000 | (code & 0xFFFF)


class _ArgumentTest(ctypes.Structure):
    """libseccomp's `struct scmp_arg_cmp`."""

    _fields_ = [
        ("arg", ctypes.c_uint),
        ("op", ctypes.c_int),
        ("datum_a", ctypes.c_uint64),
        ("datum_b", ctypes.c_uint64),
    ]


def _library() -> ctypes.CDLL:
    try:
        library = ctypes.CDLL("libseccomp.so.2", use_errno=True)
    except OSError as error:
        raise SandboxStartError(
            f"the local sandbox needs libseccomp to filter system calls ({error}); "
            "install it (Debian/Ubuntu: apt-get install libseccomp2)"
        ) from None
    library.seccomp_init.restype = ctypes.c_void_p
    library.seccomp_init.argtypes = [ctypes.c_uint32]
    library.seccomp_attr_set.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32]
    library.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    library.seccomp_rule_add_array.argtypes = [
        ctypes.c_void_p,
        ctypes.c_uint32,
        ctypes.c_int,
        ctypes.c_uint,
        ctypes.POINTER(_ArgumentTest),
    ]
    library.seccomp_export_bpf.argtypes = [ctypes.c_void_p, ctypes.c_int]
    library.seccomp_release.argtypes = [ctypes.c_void_p]
    return library


class _Filter:
    def __init__(self, library: ctypes.CDLL):
        self.library = library
        self.context = library.seccomp_init(SCMP_ACT_ALLOW)
        if not self.context:
            raise SandboxStartError("libseccomp could not start a filter (seccomp_init)")
        self._check(
            library.seccomp_attr_set(self.context, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS),
            "set the action for other architectures",
        )

    def _check(self, result: int, what: str) -> None:
        if result < 0:
            raise SandboxStartError(
                f"libseccomp could not {what}: {os.strerror(-result)}; the sandbox needs "
                "libseccomp 2.4 or later"
            )

    def deny(self, name: str, code: int, *, flags_set: int | None = None) -> None:
        """Fail `name` with `code`; with `flags_set`, only when that bit of its first
        argument is set. A call this architecture does not have is skipped."""
        number = self.library.seccomp_syscall_resolve_name(name.encode())
        if number == NR_SCMP_ERROR:
            return
        tests = None
        count = 0
        if flags_set is not None:
            tests = (_ArgumentTest * 1)(_ArgumentTest(0, SCMP_CMP_MASKED_EQ, flags_set, flags_set))
            count = 1
        self._check(
            self.library.seccomp_rule_add_array(
                self.context, _errno_action(code), number, count, tests
            ),
            f"add the rule for {name}",
        )

    def export(self) -> bytes:
        program = os.memfd_create("sandbox-seccomp", os.MFD_CLOEXEC)
        try:
            self._check(self.library.seccomp_export_bpf(self.context, program), "export the filter")
            os.lseek(program, 0, os.SEEK_SET)
            chunks = []
            while chunk := os.read(program, 65536):
                chunks.append(chunk)
            return b"".join(chunks)
        finally:
            os.close(program)

    def release(self) -> None:
        self.library.seccomp_release(self.context)


@cache
def filter_program() -> bytes:
    """The sandbox's filter as a BPF program for this machine (an array of
    `struct sock_filter`, 8 bytes per instruction), built once per process."""
    built = _Filter(_library())
    try:
        for name in DENIED:
            built.deny(name, errno.EPERM)
        for flag in NAMESPACE_FLAGS.values():
            built.deny("clone", errno.EPERM, flags_set=flag)
            built.deny("unshare", errno.EPERM, flags_set=flag)
        built.deny("unshare", errno.EPERM, flags_set=CLONE_NEWTIME)
        built.deny("clone3", errno.ENOSYS)
        return built.export()
    finally:
        built.release()
