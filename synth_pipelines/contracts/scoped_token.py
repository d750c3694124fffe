"""Scoped model-access tokens: what one attempt (or one operator session) may sample."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from synth_pipelines.contracts.sampling_limits import SamplingLimits


class AttemptScope(BaseModel):
    """What a token grants: sampling one model for one attempt of a run, as its owner and in
    one role. A token's claims carry it; the runtime's identity of an attempt adds to it what
    only the runtime knows."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    run_id: str
    attempt_id: str
    owner: str
    model: str
    role: str = Field(default="actor", pattern="^(actor|judge|interactive|operator)$")
    batch: str | None = None
    trial_id: str | None = Field(
        default=None, description="the execution of the attempt (a Harbor trial) it serves"
    )
    sampling_seed: int | None = Field(
        default=None, description="the run's seed; the proxy derives each call's from it"
    )
    sampling_temperature: float | None = Field(
        default=None, description="the run's temperature; it replaces the harness's own"
    )
    sampling_limits: SamplingLimits | None = Field(
        default=None,
        description="the plan's limits on what the attempt samples at once and per second "
        "(None: the proxy holds the token to the defaults)",
    )


class TokenClaims(AttemptScope):
    """The authority a token carries: its scope, until it expires. A sandbox only ever sees
    its own attempt's token."""

    expires_at: int = Field(description="Unix seconds")
    token_id: str
