"""The size limit on a sandbox's writable state: one size-limited filesystem per sandbox.

Every writable top-level directory of a sandbox (`/app`, `/tmp`, `/root`, `/logs`,
...) lives under one host directory; when the task sets `storage_mb` (or the trial
overrides it), an ext4 filesystem of that size is mounted there, from a sparse image
file beside it, before anything is laid down. A write past the size fails inside the
sandbox with ENOSPC, and it fills nothing but that filesystem: the host's disks hold
at most `storage_mb` of it, and other sandboxes are untouched.

Why a disk-backed image rather than the alternatives:
- a size-limited tmpfs keeps files in memory, charged to the writer's memory cgroup
  and never reclaimable, so a sandbox whose files approach `memory_mb` is OOM-killed
  (its init first, as often as not) instead of getting ENOSPC. An image's page cache
  is charged the same way but is written back and reclaimed, as in a container;
- project or user quotas need a host filesystem mounted with them, which the state
  directory usually is not;
- a filesystem that bubblewrap creates inside the sandbox would be invisible to the
  host, which lays down the task's files, keeps them on `stop(delete=False)` and must
  read them after the agent is done.
The image is mounted through a loop device that the kernel detaches on unmount.
Teardown unmounts it (lazily if a host process still uses it, so that nothing can
keep the sandbox from being removed); `stop(delete=False)` first copies the files to
disk at the same path so they stay inspectable. A sandbox whose owner is killed
outright stays mounted until another process reclaims it (`leases.py`).

Mounting needs CAP_SYS_ADMIN, loop devices and `mkfs.ext4`. Where that is not
available, `can_mount_sized_filesystem()` is False and the sandbox logs that
`storage_mb` is not enforced, as it does for cgroup limits.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from synth_pipelines.sandbox.errors import SandboxStorageError

# No journal: the filesystem is scratch space that never outlives its sandbox, so
# crash consistency buys nothing; no reserved blocks: the whole size is the task's.
MKFS_OPTIONS = ("-q", "-F", "-m", "0", "-O", "^has_journal")
MOUNT_OPTIONS = "loop,nosuid,nodev"
IMAGE_NAME = "storage.img"
"""The image file, in the sandbox directory."""
PROBE_SIZE_MB = 4

logger = logging.getLogger(__name__)


@cache
def can_mount_sized_filesystem() -> bool:
    """Whether this process may make and loop-mount a filesystem image (tried once)."""
    if not all(shutil.which(tool) for tool in ("mkfs.ext4", "mount", "umount")):
        return False
    with tempfile.TemporaryDirectory(prefix="synth-storage-probe-") as scratch:
        probe = SizedFilesystem(Path(scratch) / "mounted", Path(scratch) / "image", PROBE_SIZE_MB)
        try:
            probe.mount()
        except SandboxStorageError:
            return False
        probe.unmount()
    return True


@dataclass(frozen=True)
class SizedFilesystem:
    """An ext4 filesystem of `size_mb` in `image`, mounted on `directory`."""

    directory: Path
    image: Path
    size_mb: int

    def mount(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        with self.image.open("xb") as image:
            image.truncate(self.size_mb * 2**20)
        _run("mkfs.ext4", *MKFS_OPTIONS, str(self.image))
        _run("mount", "-o", MOUNT_OPTIONS, str(self.image), str(self.directory))

    @property
    def mounted(self) -> bool:
        return os.path.ismount(self.directory)

    def unmount(self) -> None:
        if self.mounted:
            _detach(self.directory)
        self.image.unlink(missing_ok=True)

    def unmount_keeping_files(self) -> None:
        """Move the files to disk at the same path, then unmount."""
        if not self.mounted:
            return
        kept = self.directory.with_name(f"{self.directory.name}.kept")
        shutil.copytree(self.directory, kept, symlinks=True)
        self.unmount()
        self.directory.rmdir()
        kept.rename(self.directory)


def _detach(directory: Path) -> None:
    """Unmount `directory`. A filesystem still busy (a host process holds a file or its
    working directory there) is detached lazily instead, so that it cannot keep the
    sandbox from being removed: it leaves the directory tree at once, and the kernel
    frees it and its loop device when the last user lets go."""
    try:
        _run("umount", str(directory))
    except SandboxStorageError as error:
        _run("umount", "--lazy", str(directory))
        logger.warning("Detached %s lazily, it was still in use: %s", directory, error)


def _run(program: str, *arguments: str) -> None:
    executable = shutil.which(program)
    if executable is None:
        raise SandboxStorageError(f"`{program}` is not on PATH; install util-linux and e2fsprogs")
    completed = subprocess.run([executable, *arguments], capture_output=True, text=True)
    if completed.returncode != 0:
        raise SandboxStorageError(
            f"`{program} {' '.join(arguments)}` failed (exit {completed.returncode}): "
            f"{completed.stderr.strip()}"
        )
