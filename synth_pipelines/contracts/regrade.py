"""A regrade of a run: who assesses its retained work again, and through which backfill."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from synth_pipelines.contracts.stored import UtcDateTime


class Regrade(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, from_attributes=True)

    regrade_id: str
    run_id: str
    assessor: str
    assessor_digest: str | None
    backfill_id: str | None
    batches: int
    evaluation_only: bool
    """The run's attempts left no captured actor calls: these assessments cannot train."""
    created_at: UtcDateTime
