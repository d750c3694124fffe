"""Kernel overlay mounts of image layers: read-only lowers, one writable upper.

The lower directories are passed relative to the layer store's root (the mount runs
with its working directory there), which keeps a deep chain's options under the
kernel's one-page limit. Redirects, metacopy and the inode index stay off: a layer's
diff then holds whole files and plain whiteouts, so any chain of layers mounts the
same way and a layer is self-contained.

Every overlay is mounted under `MOUNTS_DIR`, not beside its layers: bubblewrap resolves
the path of the root it is given as the sandbox's unprivileged setup id (`attach.py`),
and the state directory or the image cache may lie under a directory closed to that id
(a home directory, pytest's temporary root). `MOUNTS_DIR` is root's, and others may
traverse it but neither list nor write it.
"""

from __future__ import annotations

import os
import stat
import subprocess
from collections.abc import Sequence
from contextlib import suppress
from pathlib import Path

from synth_pipelines.sandbox.errors import SandboxStartError

MOUNTS_DIR = Path("/run/synth-overlays")


def mount_point(name: str) -> Path:
    """Where the overlay called `name` (a sandbox's or a build step's) is mounted."""
    return MOUNTS_DIR / name


def _prepare_mounts_dir() -> None:
    MOUNTS_DIR.mkdir(mode=0o711, parents=True, exist_ok=True)
    found = MOUNTS_DIR.lstat()
    if not stat.S_ISDIR(found.st_mode) or found.st_uid != 0 or found.st_mode & 0o022:
        raise SandboxStartError(
            f"{MOUNTS_DIR} must be a directory owned by root that only root may write"
        )
    MOUNTS_DIR.chmod(0o711)


def mount_overlay(
    name: str, lowers: Sequence[Path], upper: Path, work: Path, *, relative_to: Path
) -> Path:
    """Mount `lowers` (top first) with `upper` and `work` on `mount_point(name)`."""
    for path in (upper, work):
        path.mkdir(parents=True, exist_ok=True)
    return _overlay(name, lowers, f"upperdir={upper},workdir={work},", relative_to=relative_to)


def mount_read_only(name: str, lowers: Sequence[Path], *, relative_to: Path) -> Path:
    """Mount `lowers` (top first), with nothing writable, on `mount_point(name)`."""
    if len(lowers) == 1:
        # The kernel refuses an overlay of one lower and no upper; one layer (a base)
        # holds no whiteouts, so it is its own merged view.
        return _mount(name, ["--bind", "-o", "ro", str(lowers[0])], relative_to=relative_to)
    return _overlay(name, lowers, "", relative_to=relative_to)


def _overlay(name: str, lowers: Sequence[Path], writable: str, *, relative_to: Path) -> Path:
    lowerdir = ":".join(os.path.relpath(lower, relative_to) for lower in lowers)
    options = f"lowerdir={lowerdir},{writable}redirect_dir=off,metacopy=off,index=off,xino=off"
    return _mount(name, ["-t", "overlay", "overlay", "-o", options], relative_to=relative_to)


def _mount(name: str, arguments: Sequence[str], *, relative_to: Path) -> Path:
    target = mount_point(name)
    _prepare_mounts_dir()
    target.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(
        ["mount", *arguments, str(target)],
        cwd=relative_to,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        with suppress(OSError):
            target.rmdir()
        raise SandboxStartError(
            f"could not mount the image's layers on {target}: "
            f"{(result.stderr or result.stdout).strip()}; the local image builder needs "
            "root and the kernel's overlay filesystem"
        )
    return target


def is_mounted(target: Path) -> bool:
    wanted = str(target)
    with open("/proc/self/mountinfo") as mounts:
        return any(line.split()[4] == wanted for line in mounts)


def unmount(target: Path) -> None:
    """Detach the overlay on `target`, if one is there (lazily: a process still in it
    cannot keep the layers pinned), and remove its mountpoint."""
    if is_mounted(target):
        result = subprocess.run(
            ["umount", "--lazy", str(target)], capture_output=True, text=True, check=False
        )
        if result.returncode != 0 and is_mounted(target):
            raise OSError(f"could not unmount {target}: {result.stderr.strip()}")
    with suppress(FileNotFoundError):
        target.rmdir()
