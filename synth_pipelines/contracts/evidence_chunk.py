"""A published evidence chunk: one attempt's captured calls, stored create-only as Parquet
under `chunk_key` with its SHA-256, and committed to the control database."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from synth_pipelines.contracts.stored import UtcDateTime


class EvidenceChunk(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, from_attributes=True)

    chunk_key: str
    run_id: str
    batch: str | None
    attempt_id: str
    sha256: str
    size: int
    calls: int
    published_at: UtcDateTime
