"""The limits an image build step runs within: the task's own, as its attempts'.

A `RUN` step is the task author's code, so it gets what an attempt of the task gets:
- `memory_mb`, `cpus` and the pids bound on a cgroup of its own (`limits.py`), which
  its init and every command of the step join;
- `storage_mb` on a size-limited filesystem (`storage.py`) holding the step's writable
  layer. The bound is the image's, not each step's: a step gets what the layers of the
  image above its base leave of `storage_mb`, so splitting the writes over several
  steps does not multiply it. The finished layer is copied from there into the layer
  store (`cp -a`: whiteouts, xattrs and hard links kept) and the filesystem dropped.

A step that fails past a limit fails the build with the limit named, as a task error
(`BuildLimitExceeded.error`): `MemoryLimitExceededError` when the kernel killed a
process for memory, `TaskDefinitionError` when a fork was refused at the pids bound or
the step ran out of its storage. A step that succeeds is not second-guessed, as under
Docker's build.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from synth_pipelines.sandbox.errors import (
    MemoryLimitExceededError,
    SandboxStorageError,
    TaskDefinitionError,
)
from synth_pipelines.sandbox.limits import ResourceLimits
from synth_pipelines.sandbox.storage import IMAGE_NAME, SizedFilesystem, can_mount_sized_filesystem

BOUNDED_DIR = "bounded"
# What a full filesystem leaves: ext4 keeps a few blocks back even with no reserve.
FULL_BELOW_BYTES = 1 << 20
NO_SPACE = "No space left on device"

Limit = Literal["memory", "pids", "storage"]


@dataclass(frozen=True)
class BuildLimits:
    """The task's limits, as its attempts get them; None: not limited."""

    resources: ResourceLimits = field(default_factory=ResourceLimits)
    storage_mb: int | None = None


@dataclass(frozen=True)
class WritableLayer:
    """Where a step's overlay writes: its upper and work directories, and the
    filesystem that bounds them (None: unbounded, the upper is the layer itself)."""

    upper: Path
    work: Path
    storage: SizedFilesystem | None

    def full(self) -> bool:
        if self.storage is None:
            return False
        found = os.statvfs(self.storage.directory)
        return found.f_bavail * found.f_frsize < FULL_BELOW_BYTES


class BuildLimitExceeded(Exception):
    """A build step failed past one of the task's limits."""

    def __init__(self, limit: Limit, bound: str, detail: str):
        super().__init__(f"{limit} limit {bound}: {detail}")
        self.limit = limit
        self.bound = bound
        self.detail = detail

    def error(self, *, task: str, step: str) -> Exception:
        """The task error that fails the attempt, naming the limit and how to fix it."""
        where = f"the image build's step {step}"
        if self.limit == "memory":
            return MemoryLimitExceededError(
                f"Task {task!r}: {where} exceeded its memory limit of {self.bound} "
                f"([environment].memory_mb): {self.detail}. Raise memory_mb in task.toml "
                "(or override_memory_mb) or make the step use less memory."
            )
        if self.limit == "pids":
            return TaskDefinitionError(
                task,
                f"{where} reached its limit of {self.bound} processes and threads (the "
                f"environment's pids_max): {self.detail}; start fewer processes at once",
            )
        return TaskDefinitionError(
            task,
            f"{where} ran out of its storage bound of {self.bound} "
            f"([environment].storage_mb, which the image's layers above its base share): "
            f"{self.detail}; raise storage_mb in task.toml (or override_storage_mb) or "
            "make the image smaller",
        )


def storage_left_mb(limits: BuildLimits, used_bytes: int) -> int | None:
    """What `storage_mb` leaves a step whose parent layers (above the base) hold
    `used_bytes`; None when storage is not bounded here. Raises `BuildLimitExceeded`
    when nothing is left."""
    if limits.storage_mb is None or not can_mount_sized_filesystem():
        return None
    left = limits.storage_mb - (used_bytes >> 20)
    if left < 1:
        raise BuildLimitExceeded(
            "storage",
            f"{limits.storage_mb} MB",
            f"the layers below it already hold {used_bytes >> 20} MB",
        )
    return left


@contextlib.asynccontextmanager
async def writable_layer(diff: Path, size_mb: int | None) -> AsyncIterator[WritableLayer]:
    """The step's writable layer: `diff` itself when unbounded; else an upper on a
    filesystem of `size_mb` beside it, copied into `diff` when the block ends without
    an exception, then dropped."""
    scratch = diff.parent
    if size_mb is None:
        yield WritableLayer(diff, scratch / "work", None)
        return
    storage = SizedFilesystem(scratch / BOUNDED_DIR, scratch / IMAGE_NAME, size_mb)
    await asyncio.to_thread(storage.mount)
    try:
        layer = WritableLayer(storage.directory / "upper", storage.directory / "work", storage)
        yield layer
        await asyncio.to_thread(_copy_tree, layer.upper, diff)
    finally:
        await asyncio.to_thread(storage.unmount)
        with contextlib.suppress(OSError):
            storage.directory.rmdir()


def _copy_tree(source: Path, target: Path) -> None:
    """`source`'s contents into `target`, as they are: owners, modes, times, xattrs
    (overlayfs keeps opaque directories in one), whiteouts (device nodes), hard links."""
    target.mkdir(parents=True, exist_ok=True)
    cp = shutil.which("cp")
    if cp is None:
        raise SandboxStorageError("`cp` is not on PATH; install coreutils")
    completed = subprocess.run(
        [cp, "-a", "--reflink=auto", f"{source}/.", str(target)],
        capture_output=True,
        text=True,
        check=False,
    )
    if completed.returncode != 0:
        raise SandboxStorageError(
            f"could not copy the built layer from {source} to {target}: {completed.stderr.strip()}"
        )
