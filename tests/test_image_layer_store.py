"""The layer store is bounded: it prunes least recently used layers, never one a sandbox
holds, and a pruned layer takes the layers built on it along."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from synth_pipelines.sandbox.layers import LAYER_FILE, Layer, LayerStore

MIB = 1 << 20


def add(store: LayerStore, key: str, parent: Layer | None, size: int = MIB) -> Layer:
    async def make(diff: Path) -> None:
        (diff / "data").write_bytes(os.urandom(size))

    return asyncio.run(store.build(key * 8, parent=parent, description=key, make=make))


def age(layer: Layer, seconds_ago: float) -> None:
    stamp = time.time() - seconds_ago
    os.utime(layer.path / LAYER_FILE, (stamp, stamp))


def test_prune_removes_least_recently_used_layers_with_their_descendants(tmp_path):
    store = LayerStore(tmp_path / "layers")
    old = add(store, "a", None)
    above_old = add(store, "b", old)
    recent = add(store, "c", None)
    age(old, 300)
    age(above_old, 10)
    age(recent, 100)
    removed = store.prune(keep_bytes=int(1.5 * MIB))
    # The oldest goes first and takes the layer built on it, though that one was recent.
    assert [layer.description for layer in removed] == ["a", "b"]
    assert [layer.description for layer in store.layers()] == ["c"]


def test_prune_skips_layers_a_sandbox_holds(tmp_path):
    store = LayerStore(tmp_path / "layers")
    base = add(store, "a", None)
    top = add(store, "b", base)
    other = add(store, "c", None)
    held = store.hold(store.chain(top))
    age(base, 300)
    age(top, 300)
    age(other, 100)
    try:
        removed = store.prune(keep_bytes=0)
    finally:
        held.release()
    assert [layer.description for layer in removed] == ["c"]
    assert {layer.description for layer in store.layers()} == {"a", "b"}
    # Once released, the same bound removes them.
    assert {layer.description for layer in store.prune(keep_bytes=0)} == {"a", "b"}


def test_a_built_layer_is_found_by_key_and_an_existing_one_is_not_rebuilt(tmp_path):
    store = LayerStore(tmp_path / "layers")
    first = add(store, "a", None)
    calls = []

    async def make(diff: Path) -> None:
        calls.append(diff)

    again = asyncio.run(store.build(first.key, parent=None, description="a", make=make))
    assert again.key == first.key and calls == []
    assert store.get(first.key).size_bytes >= MIB
    assert store.get("f" * 64) is None
