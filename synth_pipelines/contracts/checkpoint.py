"""A checkpoint: usable model state a batch produced, with its lineage and dataset cursor."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from synth_pipelines.contracts.stored import UtcDateTime


class Checkpoint(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, from_attributes=True)

    sampler_path: str
    run_id: str
    batch: str
    batch_index: int
    state_path: str
    base_model: str
    owner: str
    dataset_cursor: int
    optimizer_steps: int
    created_at: UtcDateTime
