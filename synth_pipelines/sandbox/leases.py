"""Which process a sandbox belongs to, and reclaiming the sandboxes of processes that died.

A process killed outright (SIGKILL, the OOM killer) cannot stop its sandboxes. Their
processes die with it (the init's parent-death signal), but their host state stays: the
cgroup, the size-limited filesystem still mounted on the host through a loop device, and
the files. So the process that starts a sandbox holds an exclusive `flock` on
`<sandbox>/lease` until it stops it. The kernel drops that lock when the process dies,
however it dies, and a reused pid cannot pass for the owner, as it could in a pid file.

`reclaim_orphans` takes the lease of every sandbox whose owner is gone, kills what may
still run in its cgroup and removes it, and unmounts its filesystem, keeping the files
on disk as `stop(delete=False)` does, so that a killed attempt stays inspectable. Each
process that starts sandboxes runs it before its first one.
"""

from __future__ import annotations

import fcntl
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from synth_pipelines.sandbox.filesystem import SandboxFilesystem
from synth_pipelines.sandbox.limits import CgroupHierarchy, SandboxCgroup
from synth_pipelines.sandbox.storage import IMAGE_NAME, SizedFilesystem

LEASE_NAME = "lease"


@dataclass
class SandboxLease:
    """The owner's open, exclusively locked lease file of one sandbox."""

    path: Path
    descriptor: int

    @classmethod
    def take(cls, sandbox_dir: Path) -> SandboxLease:
        """Lock a new lease file, then rename it into place: a reclaimer that opens
        `lease` always finds it locked while its owner lives."""
        sandbox_dir.mkdir(parents=True, exist_ok=True)
        pending = sandbox_dir / f".{LEASE_NAME}-{secrets.token_hex(4)}"
        descriptor = os.open(pending, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC, 0o600)
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        os.write(descriptor, f"{os.getpid()}\n".encode())
        lease = sandbox_dir / LEASE_NAME
        os.rename(pending, lease)
        return cls(lease, descriptor)

    def release(self) -> None:
        self.path.unlink(missing_ok=True)
        os.close(self.descriptor)


def reclaim_orphans(sandboxes_dir: Path, hierarchy: CgroupHierarchy | None) -> list[Path]:
    """Reclaim every sandbox under `sandboxes_dir` whose owner has died; returns them."""
    try:
        sandbox_dirs = sorted(sandboxes_dir.iterdir())
    except FileNotFoundError:
        return []
    return [
        sandbox_dir for sandbox_dir in sandbox_dirs if _reclaim_if_orphaned(sandbox_dir, hierarchy)
    ]


def _reclaim_if_orphaned(sandbox_dir: Path, hierarchy: CgroupHierarchy | None) -> bool:
    lease = sandbox_dir / LEASE_NAME
    try:
        descriptor = os.open(lease, os.O_RDWR | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return False
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        if os.fstat(descriptor).st_nlink == 0:
            # Released (or reclaimed by another process) between our open and our lock.
            return False
        if hierarchy is not None:
            SandboxCgroup(hierarchy, sandbox_dir.name).remove()
        storage = SizedFilesystem(
            SandboxFilesystem(sandbox_dir, (), ()).writable_root, sandbox_dir / IMAGE_NAME, 0
        )
        storage.unmount_keeping_files()
        storage.image.unlink(missing_ok=True)
        lease.unlink()
        return True
    finally:
        os.close(descriptor)
