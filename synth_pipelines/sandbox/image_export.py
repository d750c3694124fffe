"""A built image as one root filesystem tar stream, as a container engine imports it.

The image's layers are mounted read-only (the kernel's overlay applies their whiteouts,
so what a later step deleted is absent) and the merged root is written as a tar, every
owner moved back from its host id to the id it has inside a sandbox (the inverse of
`userns.host_id`): root's files are uid 0 again, a `useradd` user's its own uid. An id
no sandbox maps (none should be in a layer) becomes `nobody`. Extended attributes are
not carried (a file capability such as `ping`'s is lost), as with `docker import` of
any tarball.
"""

from __future__ import annotations

import os
import secrets
import tarfile
from pathlib import Path
from typing import IO

from synth_pipelines.sandbox.image_build import Image
from synth_pipelines.sandbox.layers import LayerStore
from synth_pipelines.sandbox.overlay import mount_read_only, unmount
from synth_pipelines.sandbox.userns import HOST_ID_BASE, ID_COUNT

NOBODY = 65534


def inside_id(host: int) -> int:
    """The id that host id `host` is inside every sandbox; `nobody` where none maps it."""
    if HOST_ID_BASE <= host < HOST_ID_BASE + ID_COUNT:
        return host - HOST_ID_BASE
    return NOBODY


def _as_inside(member: tarfile.TarInfo) -> tarfile.TarInfo:
    member.uid, member.gid = inside_id(member.uid), inside_id(member.gid)
    member.uname = member.gname = ""
    return member


def write_root_tar(image: Image, store: LayerStore, out: IO[bytes]) -> None:
    """Stream the root filesystem of `image` (whose layers are in `store`) to `out` as a
    tar of paths from `./`. Blocking; the layers are held while they are read."""
    held = store.hold(list(image.layers))
    name = f"export-{image.key[:16]}-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        root = mount_read_only(name, [layer.diff for layer in image.layers], relative_to=store.root)
        try:
            with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as archive:
                archive.add(Path(root), arcname=".", filter=_as_inside)
        finally:
            unmount(root)
    finally:
        held.release()
