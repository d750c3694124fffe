"""A worker's hold on one batch: who claimed it, under which attempt number, until when.

A batch is run by one worker attempt at a time. The worker claims the batch, renews its
lease on every heartbeat and writes the batch's progress and completion only while its
attempt is the batch's current one; a claim made after the lease ran out supersedes it,
and from then on the old attempt's writes are refused.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field

from synth_pipelines.contracts.stored import JsonText, UtcDateTime

WorkerStatus = Literal[
    "active", "completed", "released", "cancelled", "superseded", "interrupted", "failed"
]
"""`active` holds the claim; every other status ended it. `released`: the launched steps
ended before the batch completed (a resumable prefix), and the batch may be claimed again
at once."""


class WorkerAdvertisement(BaseModel):
    """What a worker can run, checked at its claim against what the batch pinned."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    worker: str = Field(min_length=1, max_length=200)
    """The worker's identity: its service name and where it runs."""
    engines: tuple[str, ...]
    """Agent engines it can run (`builtin`, `claude-code`, `oracle`, ...)."""
    providers: tuple[str, ...]
    """Sandbox providers it can start (`local`, or Harbor's)."""
    judges: bool
    """Whether it can run a judge profile to assess work."""


class WorkerAttempt(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, from_attributes=True)

    worker_attempt_id: str
    run_id: str
    batch: str
    batch_index: int
    attempt_number: int
    """1 for a batch's first claim, one more for each claim after it."""
    worker: str
    advertised: Annotated[WorkerAdvertisement, JsonText] = Field(
        validation_alias=AliasChoices("advertised", "advertised_json")
    )
    status: WorkerStatus
    claimed_at: UtcDateTime
    lease_expires_at: UtcDateTime
    ended_at: UtcDateTime | None = None
    end_reason: str | None = None


class Heartbeat(BaseModel):
    """The reply to a worker's heartbeat: go on under a renewed lease, or stop."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    action: Literal["continue", "cancel", "superseded"]
    """`cancel`: the run was cancelled; stop, record what finished, and exit.
    `superseded`: this attempt no longer holds the batch; stop without writing."""
    lease_expires_at: UtcDateTime
    reason: str = ""
