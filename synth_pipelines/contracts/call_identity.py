"""Who made one model call: the call itself, the attempt it served (its run, batch, trial,
owner and role, from the scoped token's claims) and the agent that made it (from the
harness's headers). The capture proxy fixes it when the call arrives; the call's evidence
row (`Interaction`) holds it as its leading columns."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class CallIdentity(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    call_id: str
    run_id: str
    batch: str | None
    attempt_id: str
    trial_id: str | None
    owner: str
    role: str
    agent_id: str
    parent_agent_id: str | None
    agent_type: str | None
    native_session_id: str | None
