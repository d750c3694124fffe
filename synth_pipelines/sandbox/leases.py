"""Which process a sandbox belongs to, and reclaiming the sandboxes of processes that died.

A process killed outright (SIGKILL, the OOM killer) cannot stop its sandboxes. Their
processes die with it (the init's parent-death signal), but their host state stays: the
cgroup, the size-limited filesystem still mounted on the host through a loop device, the
overlay of an image's layers, and the files. So the process that starts a sandbox holds
an exclusive `flock` on `<sandbox>/lease` until it stops it. The kernel drops that lock
when the process dies, however it dies, and a reused pid cannot pass for the owner, as
it could in a pid file.

`reclaim_orphans` takes the lease of every sandbox whose owner is gone, kills what may
still run in its cgroup and removes it (depth first), and unmounts its filesystem,
keeping the files on disk as `stop(delete=False)` does, so that a killed attempt stays
inspectable. Each process that starts sandboxes runs it before its first one, so it
never raises: an orphan that cannot be removed is quarantined (`quarantine.py`) and
reported, and the next sandbox starts regardless.
"""

from __future__ import annotations

import fcntl
import logging
import os
import secrets
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from synth_pipelines.sandbox.errors import SandboxCleanupError, SandboxStorageError
from synth_pipelines.sandbox.filesystem import SandboxFilesystem
from synth_pipelines.sandbox.limits import CgroupHierarchy, SandboxCgroup, detect_hierarchy
from synth_pipelines.sandbox.overlay import MOUNTS_DIR, mount_point, unmount
from synth_pipelines.sandbox.quarantine import quarantine
from synth_pipelines.sandbox.storage import IMAGE_NAME, SizedFilesystem

LEASE_NAME = "lease"


def image_root(sandbox_dir: Path) -> Path:
    """Where the sandbox of `sandbox_dir`, when on an image, has its overlay root."""
    return mount_point(f"sandbox-{sandbox_dir.name}")


def verifier_mount(sandbox_dir: Path, what: str) -> Path:
    """Where the sandbox of `sandbox_dir` mounts `what` for its shared verifier: its
    image as built, or a verifier's home on it (sandbox names never hold a `+`)."""
    return mount_point(f"sandbox-{sandbox_dir.name}+{what}")


def verifier_mounts(sandbox_dir: Path) -> list[Path]:
    """The verifier mounts the sandbox of `sandbox_dir` has, the image's last (the
    homes stand on it)."""
    found = sorted(MOUNTS_DIR.glob(f"sandbox-{sandbox_dir.name}+*"))
    return sorted(found, key=lambda path: path == verifier_mount(sandbox_dir, IMAGE_VIEW))


IMAGE_VIEW = "image"


logger = logging.getLogger(__name__)


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


@dataclass(frozen=True)
class Reclaimed:
    """An orphan reclaimed; `quarantine` is its record when part of it could not be
    removed and it was set aside instead."""

    sandbox_dir: Path
    quarantine: Path | None = None
    problems: tuple[str, ...] = ()


def reclaim_orphans(sandboxes_dir: Path, hierarchy: CgroupHierarchy | None) -> list[Reclaimed]:
    """Reclaim every sandbox under `sandboxes_dir` whose owner has died; never raises."""
    try:
        sandbox_dirs = sorted(sandboxes_dir.iterdir())
    except FileNotFoundError:
        return []
    reclaimed = []
    for sandbox_dir in sandbox_dirs:
        try:
            found = _reclaim_if_orphaned(sandbox_dir, hierarchy)
        except OSError as error:
            # Not even quarantine worked (the state directory itself is failing):
            # say so and go on, the next start must not depend on it.
            logger.warning("Could not reclaim or set aside sandbox %s: %s", sandbox_dir, error)
            continue
        if found is not None:
            reclaimed.append(found)
    return reclaimed


@cache
def reclaim_orphans_once(sandboxes_dir: Path) -> None:
    """Reclaim what processes killed outright left under `sandboxes_dir`, the first time
    this process starts a sandbox there."""
    for reclaimed in reclaim_orphans(sandboxes_dir, detect_hierarchy()):
        if reclaimed.quarantine is not None:
            logger.warning(
                "Sandbox %s, left by a process that died without stopping it, could not be "
                "removed and is quarantined (%s): %s",
                reclaimed.sandbox_dir,
                reclaimed.quarantine,
                "; ".join(reclaimed.problems),
            )
        else:
            logger.warning(
                "Reclaimed sandbox %s, left by a process that died without stopping it: "
                "its cgroup is removed, its files are kept, unmounted.",
                reclaimed.sandbox_dir,
            )


def _reclaim_if_orphaned(sandbox_dir: Path, hierarchy: CgroupHierarchy | None) -> Reclaimed | None:
    lease = sandbox_dir / LEASE_NAME
    try:
        descriptor = os.open(lease, os.O_RDWR | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return None
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return None
        if os.fstat(descriptor).st_nlink == 0:
            # Released (or reclaimed by another process) between our open and our lock.
            return None
        problems = []
        cgroup = SandboxCgroup(hierarchy, sandbox_dir.name) if hierarchy is not None else None
        if cgroup is not None:
            try:
                cgroup.remove()
            except SandboxCleanupError as error:
                problems.append(str(error))
        try:
            for mounted in [*verifier_mounts(sandbox_dir), image_root(sandbox_dir)]:
                unmount(mounted)
        except OSError as error:
            problems.append(f"could not unmount its image: {error}")
        storage = SizedFilesystem(
            SandboxFilesystem(sandbox_dir, (), ()).writable_root, sandbox_dir / IMAGE_NAME, 0
        )
        try:
            storage.unmount_keeping_files()
            storage.image.unlink(missing_ok=True)
        except (SandboxStorageError, OSError) as error:
            problems.append(f"could not release its storage: {error}")
        lease.unlink()
        if problems:
            record = quarantine(sandbox_dir, cgroup, problems)
            return Reclaimed(sandbox_dir, record, tuple(problems))
        return Reclaimed(sandbox_dir)
    finally:
        os.close(descriptor)
