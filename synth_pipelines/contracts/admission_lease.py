"""An admission lease: one attempt's claim on room in a worker pool, waiting, then held
until the attempt ends; a holder that stops renewing it lets it expire."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict

from synth_pipelines.contracts.stored import UtcDateTime


@dataclass(frozen=True)
class ResourceDemand:
    """What one attempt holds while it runs."""

    cpus: float
    memory_mb: int
    storage_mb: int


class Lease(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, from_attributes=True)

    lease_id: str
    pool: str
    holder: str
    run_id: str | None
    attempt_id: str | None
    org: str | None
    """The organization of the lease's run, whose attempt limit it counts against."""
    cpus: float
    memory_mb: int
    storage_mb: int
    state: Literal["waiting", "held"]
    requested_at: UtcDateTime
    expires_at: UtcDateTime

    @property
    def demand(self) -> ResourceDemand:
        return ResourceDemand(self.cpus, self.memory_mb, self.storage_mb)
