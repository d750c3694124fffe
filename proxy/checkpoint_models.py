"""Checkpoints as models: a `tinker://` sampler path the platform recorded is served with
its base model's format and limits, and only to its owner."""

from __future__ import annotations

from functools import lru_cache

from synth_pipelines.control.checkpoints import find_checkpoint
from synth_pipelines.control.database import engine_for
from synth_pipelines.rendering.model_registry import CheckpointLookup, CheckpointModel


def checkpoint_lookup(database_url: str) -> CheckpointLookup:
    @lru_cache(maxsize=1024)
    def lookup(sampler_path: str) -> CheckpointModel | None:
        found = find_checkpoint(engine_for(database_url), sampler_path)
        return CheckpointModel(found.base_model, found.owner) if found else None

    # A checkpoint is immutable once recorded, but an unknown path may become known.
    def cached_when_known(sampler_path: str) -> CheckpointModel | None:
        found = lookup(sampler_path)
        if found is None:
            lookup.cache_clear()
        return found

    return cached_when_known
