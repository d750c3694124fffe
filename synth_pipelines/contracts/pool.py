"""`synth pool show` and `GET /v1/pool`: one worker pool's budget and leases, and per
organization its limits, what it holds and what of it waits."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from synth_pipelines.contracts.admission_lease import Lease
from synth_pipelines.contracts.org_limits import OrgLimits
from synth_pipelines.contracts.plan import ResourceBudget


class PoolUsage(BaseModel):
    """What the held leases of a pool take together."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    active_attempts: int
    cpus: float
    memory_mb: int
    storage_mb: int


class LeaseView(Lease):
    expired: bool
    """Past its expiry, so the pool's next admission decision reclaims it."""


class OrgAdmission(BaseModel):
    """One organization's limits and what it holds and waits for, over every pool."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    limits: OrgLimits
    running_runs: list[str]
    """Runs admitted and not yet ended or interrupted, oldest first."""
    queued_runs: list[str]
    """Accepted runs waiting for the organization's run limit, oldest first."""
    active_attempts: int
    waiting_attempts: int


class PoolDocument(BaseModel):
    """A worker pool's budget (as the gateway's deployment configures it), what its held
    leases take, the requests waiting in line (oldest first) and every organization's
    admission."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    pool: str
    limits: ResourceBudget
    use: PoolUsage
    held: list[LeaseView]
    waiting: list[LeaseView]
    orgs: list[OrgAdmission]
