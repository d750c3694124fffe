"""A run as the control database holds it: who asked, its pinned spec, where it stands."""

from __future__ import annotations

from typing import Annotated, get_args

from pydantic import AliasChoices, BaseModel, ConfigDict, Field

from synth_pipelines.contracts.plan import Plan
from synth_pipelines.contracts.run_spec import RunSpec
from synth_pipelines.contracts.stored import JsonText, UtcDateTime

ACTIVE = ("accepted", "running")
"""A run with work admitted or under way: its batches sample through the model service."""
TERMINAL = ("succeeded", "failed", "cancelled")
"""Final states: a run in one of them is never moved again."""
STATUSES = (*ACTIVE, "interrupted", *TERMINAL)
KINDS = tuple(
    get_args(plan.model_fields["kind"].annotation)[0] for plan in get_args(get_args(Plan)[0])
)
"""A run's kind is its plan's: eval, execute, train, warm_start."""


class RunRecord(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, from_attributes=True)

    run_id: str
    owner: str
    org: str
    """The organization of the key that submitted it, whose limits it is admitted under."""
    idempotency_key: str
    request_digest: str
    kind: str
    status: str
    batch_count: int
    spec: Annotated[RunSpec, JsonText] = Field(validation_alias=AliasChoices("spec", "spec_json"))
    created_at: UtcDateTime
    updated_at: UtcDateTime
    admitted_at: UtcDateTime | None = None
    """When the batch gate let it start under its organization's run limit; None while
    it waits in line (and for runs from before admission was recorded)."""

    @property
    def finished(self) -> bool:
        return self.status in TERMINAL
