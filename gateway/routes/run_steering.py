"""Steering an owner's run after it was accepted: cancel it, resume it after an
interruption. Another owner's run is answered as one that does not exist (404)."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from gateway.openapi import refusals
from gateway.owned_runs import SteeredRun
from gateway.state import State
from synth_pipelines.contracts.api_errors import ApiError
from synth_pipelines.contracts.documents import CancelledRun, ResumedRun
from synth_pipelines.control.policy_updates import UnresolvedUpdateError
from synth_pipelines.control.run_lifecycle import RunNotActiveError, cancel_run, resume_run
from synth_pipelines.control.runs import get_run
from synth_pipelines.services.dagster_graphql import (
    DagsterUnavailableError,
    DagsterWebserver,
    terminate_batch_runs,
)

router = APIRouter(prefix="/v1/runs", tags=["runs"])


class CancelRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reason: str = Field("cancelled by the operator", max_length=1000)


@router.post("/{run_id}/cancel", response_model=CancelledRun, responses=refusals(400, 403, 404))
def cancel(run: SteeredRun, body: CancelRequest, state: State) -> CancelledRun:
    """Stop a run: no further batch is admitted; its batches' Dagster runs in flight are
    terminated through the Dagster webserver (no operator needs the container engine)."""
    engine = state.engine
    run_id = run.run_id
    cancelled = cancel_run(engine, run_id, body.reason)
    terminated: list[str] = []
    unreachable = None
    if cancelled:
        try:
            terminated = terminate_batch_runs(DagsterWebserver(state.config.dagster_url), run_id)
        except DagsterUnavailableError as error:
            unreachable = str(error)
    return CancelledRun(
        run_id=run_id,
        status=get_run(engine, run_id).status,
        cancelled=cancelled,
        terminated=terminated,
        termination_error=unreachable,
    )


@router.post("/{run_id}/resume", response_model=ResumedRun, responses=refusals(400, 403, 404))
def resume(run: SteeredRun, state: State) -> ResumedRun:
    """Relaunch an interrupted run from its unfinished batch (never past an unresolved
    update)."""
    try:
        index = resume_run(state.engine, run.run_id)
    except (RunNotActiveError, UnresolvedUpdateError) as refused:
        raise ApiError("invalid_request_error", str(refused)) from None
    return ResumedRun(run_id=run.run_id, resumed_batch=index)
