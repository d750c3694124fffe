"""Content-addressed image layers on disk, shared by every sandbox of a state directory.

A layer is one build step's result: the files it added or changed (an overlayfs upper
directory, whiteouts included) in `<root>/<key16>/diff`, and what it is in
`layer.json` (its parent, the step, its size, when it was built). Its key hashes the
step's text, its inputs and the parent's key, so a layer never changes once written:
the same step on the same parent finds it again, and a changed step or input makes a
new one.

Concurrency. A layer is built under an exclusive `flock` on `.locks/<key16>`, in a
scratch directory renamed into place when complete, so two attempts that need the
same step build it once (the second waits, then finds it) and a killed build leaves
no half layer. A sandbox holds a shared lock on every layer it stands on for as long
as it runs, and `prune` skips layers so held: the cache can be bounded without
pulling a layer from under a running trial. Locks are taken on threads, never on the
event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import secrets
import shutil
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

KEY_LENGTH = 16
LAYER_FILE = "layer.json"


@dataclass(frozen=True)
class Layer:
    key: str
    parent: str | None
    description: str
    size_bytes: int
    built_at: float
    path: Path

    @property
    def diff(self) -> Path:
        return self.path / "diff"

    @property
    def last_used(self) -> float:
        try:
            return (self.path / LAYER_FILE).stat().st_mtime
        except FileNotFoundError:
            return self.built_at


@dataclass
class Held:
    """Shared locks on the layers a running sandbox stands on."""

    descriptors: list[int]

    def release(self) -> None:
        for descriptor in self.descriptors:
            os.close(descriptor)
        self.descriptors.clear()


class LayerStore:
    def __init__(self, root: Path):
        self.root = root

    @property
    def locks(self) -> Path:
        return self.root / ".locks"

    @property
    def scratch(self) -> Path:
        return self.root / ".scratch"

    def _lock_path(self, name: str) -> Path:
        self.locks.mkdir(parents=True, exist_ok=True)
        return self.locks / name

    def _open_lock(self, name: str, mode: int) -> int:
        descriptor = os.open(self._lock_path(name), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(descriptor, mode)
        except BaseException:
            os.close(descriptor)
            raise
        return descriptor

    @contextlib.asynccontextmanager
    async def exclusive(self, name: str) -> AsyncIterator[None]:
        descriptor = await asyncio.to_thread(self._open_lock, name, fcntl.LOCK_EX)
        try:
            yield
        finally:
            os.close(descriptor)

    def get(self, key: str) -> Layer | None:
        path = self.root / key[:KEY_LENGTH]
        try:
            record = json.loads((path / LAYER_FILE).read_text())
        except FileNotFoundError:
            return None
        return Layer(
            key=record["key"],
            parent=record["parent"],
            description=record["description"],
            size_bytes=record["size_bytes"],
            built_at=record["built_at"],
            path=path,
        )

    async def build(
        self,
        key: str,
        *,
        parent: Layer | None,
        description: str,
        make: Callable[[Path], Awaitable[None]],
    ) -> Layer:
        """The layer `key`, made by `make(diff_directory)` unless it exists already."""
        found = self.get(key)
        if found is not None:
            return found
        async with self.exclusive(key[:KEY_LENGTH]):
            found = self.get(key)
            if found is not None:
                return found
            self.scratch.mkdir(parents=True, exist_ok=True)
            pending = self.scratch / f"{key[:KEY_LENGTH]}-{secrets.token_hex(4)}"
            (pending / "diff").mkdir(parents=True)
            try:
                await make(pending / "diff")
                size = await asyncio.to_thread(_disk_usage, pending / "diff")
                record = {
                    "key": key,
                    "parent": parent.key if parent is not None else None,
                    "description": description,
                    "size_bytes": size,
                    "built_at": time.time(),
                }
                (pending / LAYER_FILE).write_text(json.dumps(record, indent=2) + "\n")
                os.rename(pending, self.root / key[:KEY_LENGTH])
            finally:
                if pending.exists():
                    await asyncio.to_thread(shutil.rmtree, pending, True)
        layer = self.get(key)
        assert layer is not None
        return layer

    def layers(self) -> list[Layer]:
        if not self.root.is_dir():
            return []
        found = (self.get(path.name) for path in sorted(self.root.iterdir()) if path.is_dir())
        return [layer for layer in found if layer is not None]

    def chain(self, layer: Layer) -> list[Layer]:
        """`layer` and its ancestors, top first (overlayfs' lowerdir order)."""
        chain = [layer]
        while chain[-1].parent is not None:
            parent = self.get(chain[-1].parent)
            if parent is None:
                raise FileNotFoundError(f"layer {chain[-1].parent[:KEY_LENGTH]} is missing")
            chain.append(parent)
        return chain

    def hold(self, layers: list[Layer]) -> Held:
        """Shared locks on `layers` (blocking: call it off the event loop); a layer
        being pruned at that moment is gone once the lock is had, which `held_layers`
        checks."""
        held = Held([])
        try:
            for layer in layers:
                held.descriptors.append(self._open_lock(layer.key[:KEY_LENGTH], fcntl.LOCK_SH))
                if self.get(layer.key) is None:
                    raise FileNotFoundError(f"layer {layer.key[:KEY_LENGTH]} was pruned")
        except BaseException:
            held.release()
            raise
        for layer in layers:
            os.utime(layer.path / LAYER_FILE)
        return held

    def in_use(self, layer: Layer) -> bool:
        """Whether a running sandbox (or a build) holds `layer` now."""
        with self._unheld([layer]) as free:
            return not free

    def prune(self, keep_bytes: int) -> list[Layer]:
        """Remove least recently used layers until the store holds at most `keep_bytes`,
        skipping layers a sandbox holds; a removed layer takes its descendants along.
        Returns what was removed."""
        removed: list[Layer] = []
        layers = sorted(self.layers(), key=lambda layer: layer.last_used)
        total = sum(layer.size_bytes for layer in layers)
        for layer in layers:
            if total <= keep_bytes:
                break
            if any(gone.key == layer.key for gone in removed):
                continue
            family = [layer, *self._descendants(layer)]
            with self._unheld(family) as free:
                if not free:
                    continue
                for member in family:
                    shutil.rmtree(member.path, ignore_errors=True)
                    total -= member.size_bytes
                    removed.append(member)
        return removed

    def _descendants(self, layer: Layer) -> list[Layer]:
        found: list[Layer] = []
        frontier = {layer.key}
        others = self.layers()
        while frontier:
            children = [other for other in others if other.parent in frontier]
            found += children
            frontier = {child.key for child in children}
        return found

    @contextlib.contextmanager
    def _unheld(self, family: list[Layer]) -> Iterator[bool]:
        """Exclusive locks on every layer of `family`, if none is held; yields whether."""
        descriptors: list[int] = []
        try:
            for member in family:
                try:
                    descriptors.append(
                        self._open_lock(member.key[:KEY_LENGTH], fcntl.LOCK_EX | fcntl.LOCK_NB)
                    )
                except BlockingIOError:
                    yield False
                    return
            yield True
        finally:
            for descriptor in descriptors:
                os.close(descriptor)


def _disk_usage(path: Path) -> int:
    total = 0
    for directory, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(FileNotFoundError):
                total += os.lstat(os.path.join(directory, name)).st_blocks * 512
    return total
