"""Every process in the sandbox runs under its seccomp filter: the denied calls fail,
no new namespace can be made, other ABIs kill the caller, and the kernel keyrings stay
out of reach. Everything else (threads, processes, tracing one's own child) works."""

from __future__ import annotations

import asyncio
import errno
import json
import platform
import secrets
import signal
from pathlib import Path

import pytest
from sandbox_support import isolated_state, make_environment, make_task

from synth_pipelines.sandbox.seccomp import DENIED

SIGSYS_EXIT = 128 + signal.SIGSYS

# Runs inside with the host's python3; numbers from libseccomp, as the filter's are.
CALL_EACH = """python3 - <<'PY'
import ctypes, json
libc = ctypes.CDLL(None, use_errno=True)
seccomp = ctypes.CDLL("libseccomp.so.2")
seccomp.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
errors = {}
for name in NAMES:
    number = seccomp.seccomp_syscall_resolve_name(name.encode())
    ctypes.set_errno(0)
    result = libc.syscall(number, 0, 0, 0, 0, 0, 0)
    errors[name] = ctypes.get_errno() if result == -1 else f"returned {result}"
print(json.dumps(errors))
PY"""

UNSHARE_EACH = """python3 - <<'PY'
import ctypes, json
libc = ctypes.CDLL(None, use_errno=True)
flags = {"CLONE_NEWUSER": 0x10000000, "CLONE_NEWNS": 0x20000, "CLONE_NEWPID": 0x20000000,
         "CLONE_NEWNET": 0x40000000, "CLONE_NEWIPC": 0x08000000, "CLONE_NEWUTS": 0x04000000,
         "CLONE_NEWCGROUP": 0x02000000}
errors = {}
for name, flag in flags.items():
    ctypes.set_errno(0)
    errors[name] = "made" if libc.unshare(flag) == 0 else ctypes.get_errno()
print(json.dumps(errors))
PY"""

# What the agent did to block teardown: a user namespace, then cgroupfs mounted in it.
MOUNT_CGROUPFS = (
    "mkdir -p /tmp/hierarchy && unshare --user --map-root-user --mount --cgroup "
    "sh -c 'mount -t cgroup -o pids none /tmp/hierarchy && mkdir /tmp/hierarchy/x'"
)

CLONE3_AND_FALLBACK = """python3 - <<'PY'
import ctypes, json, subprocess, threading
libc = ctypes.CDLL(None, use_errno=True)
seccomp = ctypes.CDLL("libseccomp.so.2")
clone3 = seccomp.seccomp_syscall_resolve_name(b"clone3")
ctypes.set_errno(0)
libc.syscall(clone3, 0, 0)
threads = [threading.Thread(target=lambda: None) for _ in range(4)]
[thread.start() for thread in threads]
[thread.join() for thread in threads]
child = subprocess.run(["echo", "forked"], capture_output=True, text=True).stdout.strip()
print(json.dumps({"clone3": ctypes.get_errno(), "threads": len(threads), "child": child}))
PY"""

X32_GETPID = """python3 -c '
import ctypes
print(ctypes.CDLL(None).syscall(0x40000000 | 39))
'"""
I386_GETPID = """python3 -c '
import ctypes, mmap
code = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
code.write(bytes([0xB8, 0x14, 0, 0, 0, 0xCD, 0x80, 0xC3]))  # mov eax, 20; int 0x80; ret
print(ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(code)))())
'"""

ADD_KEYS = """python3 - <<'PY'
import ctypes, json
libc = ctypes.CDLL(None, use_errno=True)
seccomp = ctypes.CDLL("libseccomp.so.2")
add_key = seccomp.seccomp_syscall_resolve_name(b"add_key")
errors = {}
for name, keyring in {"user": -4, "session": -3, "process": -2}.items():
    ctypes.set_errno(0)
    key = libc.syscall(add_key, b"user", b"DESCRIPTION-" + name.encode(), b"secret", 6, keyring)
    errors[name] = ctypes.get_errno() if key == -1 else f"key {key}"
print(json.dumps(errors))
PY"""

TRACE = """python3 - <<'PY'
import ctypes, json, os, signal
libc = ctypes.CDLL(None, use_errno=True)
PTRACE_ATTACH, PTRACE_DETACH = 16, 17
def attach(pid):
    ctypes.set_errno(0)
    return "attached" if libc.ptrace(PTRACE_ATTACH, pid, 0, 0) == 0 else ctypes.get_errno()
child = os.fork()
if child == 0:
    signal.pause()
    os._exit(0)
own = attach(child)
os.waitpid(child, 0)
libc.ptrace(PTRACE_DETACH, child, 0, 0)
os.kill(child, signal.SIGKILL)
print(json.dumps({"own_child": own, "pid_1": attach(1)}))
PY"""


@pytest.fixture(autouse=True)
def state_dir(tmp_path, monkeypatch):
    yield from isolated_state(tmp_path, monkeypatch)


def run(environment, *commands):
    async def go():
        await environment.start(force_build=False)
        try:
            return [await environment.exec(command) for command in commands]
        finally:
            await environment.stop(delete=True)

    return asyncio.run(go())


def sandbox(tmp_path: Path):
    return make_environment(make_task(tmp_path), tmp_path / "trial")


def test_every_process_inside_runs_under_the_filter(tmp_path):
    (status,) = run(sandbox(tmp_path), "grep -H '^Seccomp:' /proc/1/status /proc/self/status")
    assert status.stdout.split() == [
        "/proc/1/status:Seccomp:",
        "2",
        "/proc/self/status:Seccomp:",
        "2",
    ], status


def test_denied_system_calls_fail_with_eperm(tmp_path):
    probe = CALL_EACH.replace("NAMES", json.dumps(list(DENIED)))
    (result,) = run(sandbox(tmp_path), probe)
    assert result.return_code == 0, result
    assert json.loads(result.stdout) == dict.fromkeys(DENIED, errno.EPERM)


def test_no_namespace_can_be_made_inside(tmp_path):
    unshared, mounted = run(sandbox(tmp_path), UNSHARE_EACH, MOUNT_CGROUPFS)
    assert set(json.loads(unshared.stdout).values()) == {errno.EPERM}, unshared
    assert mounted.return_code != 0
    assert "unshare failed: Operation not permitted" in mounted.stderr, mounted


def test_clone3_reports_enosys_so_threads_and_processes_fall_back_to_clone(tmp_path):
    (result,) = run(sandbox(tmp_path), CLONE3_AND_FALLBACK)
    assert json.loads(result.stdout) == {"clone3": errno.ENOSYS, "threads": 4, "child": "forked"}


@pytest.mark.skipif(platform.machine() != "x86_64", reason="x32 and i386 are x86_64's other ABIs")
def test_system_calls_of_other_abis_kill_the_caller(tmp_path):
    """x32 numbers and i386's `int 0x80` would reach syscalls by other numbers than the
    filter's; whether or not this kernel serves them, the filter kills the caller."""
    x32, i386 = run(sandbox(tmp_path), X32_GETPID, I386_GETPID)
    assert x32.return_code == SIGSYS_EXIT, x32
    assert i386.return_code == SIGSYS_EXIT, i386


def test_kernel_keyrings_are_out_of_reach(tmp_path):
    """add_key into the user keyring used to land in host root's `_uid.0` keyring."""
    marker = f"DESCRIPTION-{secrets.token_hex(4)}"
    (result,) = run(sandbox(tmp_path), ADD_KEYS.replace("DESCRIPTION-", marker))
    assert json.loads(result.stdout) == {
        "user": errno.EPERM,
        "session": errno.EPERM,
        "process": errno.EPERM,
    }
    assert marker not in Path("/proc/keys").read_text()


def test_commands_may_trace_their_own_children_but_not_pid_1(tmp_path):
    """The init runs as an id no command runs as, and commands hold no capability."""
    (result,) = run(sandbox(tmp_path), TRACE)
    assert json.loads(result.stdout) == {"own_child": "attached", "pid_1": errno.EPERM}
