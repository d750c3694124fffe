"""Binding the sandbox's own host directories into its mount namespace, from the host.

bubblewrap sets the sandbox up as an unprivileged id of its user namespace
(`userns.SETUP_ID`), which may not traverse host directories closed to others: the
state directory usually lies under one (a home directory, pytest's temporary root),
and so may a harness's runtime. So bubblewrap mounts only what everyone may read (the
host's system directories, the `/etc` entries) and leaves an empty mountpoint for each
of the sandbox's writable directories and host binds; once its init runs, the
controller, as host root, clones each source as a detached mount (`open_tree`, which
resolves the path with host root's rights), applies the flags (`mount_setattr`:
read-only where asked, always nosuid and nodev) and moves it onto its mountpoint
inside (`move_mount`). These are the kernel's new mount API calls (Linux 5.12).

The move happens on a thread of its own that first unshares its filesystem context
and then joins the sandbox's mount namespace; the thread ends right after, so no
thread of the controller stays in the sandbox's view.
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

from synth_pipelines.sandbox.errors import SandboxStartError

# These calls have the same numbers on every architecture (they came after the
# syscall tables were unified).
SYS_OPEN_TREE = 428
SYS_MOVE_MOUNT = 429
SYS_MOUNT_SETATTR = 442
AT_FDCWD = -100
AT_EMPTY_PATH = 0x1000
AT_RECURSIVE = 0x8000
OPEN_TREE_CLONE = 1
OPEN_TREE_CLOEXEC = os.O_CLOEXEC
MOVE_MOUNT_F_EMPTY_PATH = 0x4
MOUNT_ATTR_RDONLY = 0x1
MOUNT_ATTR_NOSUID = 0x2
MOUNT_ATTR_NODEV = 0x4


class _MountAttributes(ctypes.Structure):
    _fields_ = [
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


_libc = ctypes.CDLL(None, use_errno=True)


def _syscall(number: int, *arguments: object, what: str) -> int:
    result: int = _libc.syscall(number, *arguments)
    if result < 0:
        error = ctypes.get_errno()
        raise SandboxStartError(
            f"could not {what}: {os.strerror(error)}; the local sandbox needs Linux 5.12 "
            "or later (open_tree, move_mount, mount_setattr)"
        )
    return result


def _detached(source: Path, read_only: bool) -> int:
    """A detached copy of the mount tree at `source`, with the sandbox's mount flags."""
    tree = _syscall(
        SYS_OPEN_TREE,
        AT_FDCWD,
        str(source).encode(),
        OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE,
        what=f"clone the mount of {source}",
    )
    flags = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | (MOUNT_ATTR_RDONLY if read_only else 0)
    attributes = _MountAttributes(attr_set=flags)
    try:
        _syscall(
            SYS_MOUNT_SETATTR,
            tree,
            b"",
            AT_EMPTY_PATH | AT_RECURSIVE,
            ctypes.byref(attributes),
            ctypes.sizeof(attributes),
            what=f"set the mount flags of {source}",
        )
    except BaseException:
        os.close(tree)
        raise
    return tree


def attach(
    mount_namespace: int, root: int, binds: Sequence[tuple[Path, PurePosixPath, bool]]
) -> None:
    """Mount each (host source, sandbox target, read-only) into the sandbox whose mount
    namespace and root directory are the open descriptors given, in order."""
    trees: list[tuple[int, PurePosixPath]] = []
    failure: list[BaseException] = []
    try:
        for source, target, read_only in binds:
            trees.append((_detached(source, read_only), target))

        def move() -> None:
            try:
                os.unshare(os.CLONE_FS)
                os.setns(mount_namespace, os.CLONE_NEWNS)
                for tree, target in trees:
                    _syscall(
                        SYS_MOVE_MOUNT,
                        tree,
                        b"",
                        root,
                        str(target.relative_to("/")).encode(),
                        MOVE_MOUNT_F_EMPTY_PATH,
                        what=f"mount {target} inside the sandbox",
                    )
            except BaseException as error:
                failure.append(error)

        thread = threading.Thread(target=move, name="sandbox-attach", daemon=True)
        thread.start()
        thread.join()
    finally:
        for tree, _ in trees:
            os.close(tree)
    if failure:
        raise failure[0]
