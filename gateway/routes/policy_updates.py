"""The policy update a training run stopped at, unresolved: read it, and the owner's
decision about it (`synth train resolve`); then `POST /v1/runs/{run_id}/resume` continues
the run. Another owner's run is answered as one that does not exist (404)."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from gateway.openapi import refusals
from gateway.owned_runs import SteeredRun, ViewedRun
from gateway.state import State
from synth_pipelines.contracts.api_errors import ApiError
from synth_pipelines.contracts.policy_update import PolicyUpdate
from synth_pipelines.control.policy_updates import (
    UnresolvedUpdateError,
    resolve,
    unresolved_updates,
)

router = APIRouter(prefix="/v1/runs", tags=["runs"])


class UpdateResolution(BaseModel):
    model_config = ConfigDict(extra="forbid")

    applied_state: str | None = Field(
        None,
        max_length=1000,
        description="The update was applied, and the trainer state saved after it is this "
        "path; none: it was not applied (or is lost), and is redone from the last checkpoint.",
    )
    note: str = Field("", max_length=1000, description="Why; kept with the resolution.")


@router.get("/{run_id}/unresolved", response_model=list[PolicyUpdate], responses=refusals(400, 404))
def unresolved(run: ViewedRun, state: State) -> list[PolicyUpdate]:
    """The run's unresolved policy update, if it stopped at one (none: an empty list)."""
    return unresolved_updates(state.engine, run.run_id)


@router.post("/{run_id}/resolution", response_model=PolicyUpdate, responses=refusals(400, 403, 404))
def resolution(run: SteeredRun, body: UpdateResolution, state: State) -> PolicyUpdate:
    """Resolve the run's unresolved update: applied (with the state saved after it) or
    discarded; refused when the run has none."""
    try:
        return resolve(state.engine, run.run_id, applied_state=body.applied_state, note=body.note)
    except UnresolvedUpdateError as refused:
        raise ApiError("invalid_request_error", str(refused)) from None
