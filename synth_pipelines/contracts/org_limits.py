"""An organization's admission limits: how many of its runs may be running at once and
how many of its attempts may hold a worker pool's room at once, across every pool.

No limit (None) means unlimited; an organization nobody has set limits for has none.
What is over a limit waits in line, it is never refused.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from synth_pipelines.contracts.operator_key import NAME_PATTERN

MAX_LIMIT = 1_000_000
"""Far above any deployment's room, and within every database's integer."""


class LimitsRequest(BaseModel):
    """What an admin sets: both limits at once, None for unlimited. Strict: a limit is a
    JSON integer, never a boolean or a string that looks like one."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    max_concurrent_runs: int | None = Field(
        default=None,
        ge=0,
        le=MAX_LIMIT,
        description="Runs admitted at once; 0 holds every new run in line.",
    )
    max_active_attempts: int | None = Field(
        default=None,
        ge=0,
        le=MAX_LIMIT,
        description="Attempts holding pool room at once, over every pool.",
    )


class OrgLimits(LimitsRequest):
    """One organization's limits as the control database holds them."""

    model_config = ConfigDict(extra="forbid", frozen=True, from_attributes=True)

    org: str = Field(pattern=NAME_PATTERN)
