"""A model call the platform failed: what the capture proxy refused or could not serve,
counted per attempt and role, with the latest fault."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from synth_pipelines.contracts.stored import UtcDateTime


class ModelCallFault(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, from_attributes=True)

    run_id: str
    attempt_id: str
    role: str
    faults: int
    status: int
    error_type: str
    message: str
    first_at: UtcDateTime
    last_at: UtcDateTime

    def describe(self) -> str:
        times = "" if self.faults == 1 else f" ({self.faults} failed calls; the last:)"
        return f"model call failed{times} {self.status} {self.error_type}: {self.message}"
