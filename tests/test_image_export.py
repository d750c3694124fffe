"""A built image exports as the root filesystem a container engine imports: what a later
layer deleted is absent, every owner is the id it has inside a sandbox, and an image of
one layer (a base with only ENV or USER steps above it) exports too."""

from __future__ import annotations

import asyncio
import io
import os
import tarfile
from pathlib import Path

from synth_pipelines.sandbox.image_build import Image
from synth_pipelines.sandbox.image_export import NOBODY, write_root_tar
from synth_pipelines.sandbox.layers import Layer, LayerStore
from synth_pipelines.sandbox.overlay import MOUNTS_DIR
from synth_pipelines.sandbox.userns import host_id


def layer(store: LayerStore, key: str, parent: Layer | None, files: dict[str, int]) -> Layer:
    """A layer holding `files` (path: owner inside, -1 for a whiteout)."""

    async def make(diff: Path) -> None:
        for name, owner in files.items():
            path = diff / name
            path.parent.mkdir(parents=True, exist_ok=True)
            if owner < 0:
                os.mknod(path, 0o600 | 0o020000, os.makedev(0, 0))  # overlay's whiteout
                continue
            path.write_text(name)
            os.chown(path, host_id(owner), host_id(owner))

    return asyncio.run(store.build(key * 16, parent=parent, description=key, make=make))


def exported(store: LayerStore, layers: tuple[Layer, ...]) -> dict[str, tuple[int, int]]:
    image = Image(base="test", layers=layers, env={}, workdir=None, user=None)
    stream = io.BytesIO()
    write_root_tar(image, store, stream)
    stream.seek(0)
    with tarfile.open(fileobj=stream) as archive:
        return {member.name: (member.uid, member.gid) for member in archive if member.isfile()}


def test_an_image_exports_with_deletions_applied_and_owners_as_inside(tmp_path):
    store = LayerStore(tmp_path / "layers")
    base = layer(store, "a", None, {"etc/passwd": 0, "home/dev/notes": 1234, "tmp/junk": 0})
    above = layer(store, "b", base, {"tmp/junk": -1, "home/dev/new": 1234})
    assert exported(store, (above, base)) == {
        "./etc/passwd": (0, 0),
        "./home/dev/notes": (1234, 1234),
        "./home/dev/new": (1234, 1234),
    }
    # Its mount is gone with the export.
    assert not list(MOUNTS_DIR.glob(f"export-{above.key[:16]}-*"))


def test_an_image_of_one_layer_exports(tmp_path):
    store = LayerStore(tmp_path / "layers")
    base = layer(store, "a", None, {"etc/passwd": 0, "opt/stray": 0})
    os.chown(base.diff / "opt" / "stray", 1000, 1000)  # an id no sandbox maps
    assert exported(store, (base,)) == {"./etc/passwd": (0, 0), "./opt/stray": (NOBODY, NOBODY)}
