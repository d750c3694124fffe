"""A built image as a sandbox's whole root (a trial's or a build step's): what bubblewrap
mounts, and mountpoints in it.

The image's layers are overlay-mounted on the host under a directory bubblewrap's setup
id may traverse (`overlay.py`), and bubblewrap binds that root through an open
descriptor (`--bind-fd`), so the path it resolves is the one mounted, not whatever a
rename could put there.
`/proc` and `/dev` are its own, as in any sandbox, with the same read-only kernel
interfaces (`filesystem.PROC_READ_ONLY`).

Mountpoints for host binds (Harbor's log directories, a harness's runtime) are made in
the writable layer by host root, so every step refuses to follow a link: an image's
files are the task author's, and an absolute link in them names a host path when
resolved on the host.
"""

from __future__ import annotations

import os
import stat
from pathlib import PurePosixPath

from synth_pipelines.sandbox.errors import SandboxPathError
from synth_pipelines.sandbox.filesystem import PROC_READ_ONLY
from synth_pipelines.sandbox.userns import host_id

ROOT_MODE = 0o755


def image_bwrap_arguments(root_fd: int) -> list[str]:
    arguments = ["--bind-fd", str(root_fd), "/", "--proc", "/proc", "--dev", "/dev"]
    for name in PROC_READ_ONLY:
        arguments += ["--ro-bind-try", f"/proc/{name}", f"/proc/{name}"]
    return arguments


def _open_parent(root_fd: int, path: PurePosixPath) -> int:
    """A descriptor of `path`'s parent inside the image, made (root's inside, 0755)
    where missing, never through a link."""
    current = os.dup(root_fd)
    try:
        for part in path.parent.parts[1:]:
            try:
                os.mkdir(part, ROOT_MODE, dir_fd=current)
                os.chown(part, host_id(0), host_id(0), dir_fd=current, follow_symlinks=False)
                # mkdir's mode passes through the controller's (owner-only) umask.
                os.chmod(part, ROOT_MODE, dir_fd=current, follow_symlinks=False)
            except FileExistsError:
                pass
            try:
                following = os.open(
                    part, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=current
                )
            except (NotADirectoryError, OSError) as error:
                raise SandboxPathError(
                    f"cannot make {path} in the image: {part!r} is not a directory there "
                    f"(a link or a file: {error.strerror})"
                ) from None
            os.close(current)
            current = following
    except BaseException:
        os.close(current)
        raise
    return current


def make_directory(root_fd: int, path: PurePosixPath, mode: int = ROOT_MODE) -> None:
    """Make `path` (and its parents) in the image as root's inside, unless it is one."""
    parent = _open_parent(root_fd, path)
    try:
        try:
            os.mkdir(path.name, mode, dir_fd=parent)
            os.chown(path.name, host_id(0), host_id(0), dir_fd=parent, follow_symlinks=False)
            os.chmod(path.name, mode, dir_fd=parent, follow_symlinks=False)
        except FileExistsError:
            found = os.stat(path.name, dir_fd=parent, follow_symlinks=False)
            if not stat.S_ISDIR(found.st_mode):
                raise SandboxPathError(f"{path} in the image is not a directory") from None
    finally:
        os.close(parent)


def make_file(root_fd: int, path: PurePosixPath) -> None:
    """Make `path` an (empty) regular file in the image, a mountpoint for a file bind;
    an existing one is only opened for reading, which copies nothing into the upper."""
    parent = _open_parent(root_fd, path)
    try:
        descriptor = os.open(
            path.name, os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=parent
        )
        os.close(descriptor)
    except OSError as error:
        raise SandboxPathError(f"cannot make {path} in the image: {error.strerror}") from None
    finally:
        os.close(parent)
