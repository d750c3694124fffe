"""Regrading an owner's run: its retained work assessed again, by a judge or by the tasks'
own verifiers, as a backfill of `assessments` the gateway launches through the Dagster
webserver; and the regrade's progress. Another owner's run is answered as one that does
not exist (404), and so is a regrade of another run."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import Engine

from gateway.openapi import refusals
from gateway.owned_runs import SteeredRun, ViewedRun
from gateway.routes.dagster import dagster_ui_url
from gateway.state import State
from synth_pipelines.contracts.api_errors import ApiError
from synth_pipelines.contracts.documents import RegradeDocument, RunProgressDocument
from synth_pipelines.contracts.profile import PinnedProfile
from synth_pipelines.contracts.regrade import Regrade
from synth_pipelines.contracts.run_record import RunRecord
from synth_pipelines.contracts.run_submission import ProfileArgument
from synth_pipelines.control.regrades import get_regrade
from synth_pipelines.runtime.regrade import RegradeRefusedError
from synth_pipelines.runtime.regrade_progress import regrade_progress
from synth_pipelines.runtime.regrade_request import request_regrade
from synth_pipelines.services.dagster_graphql import (
    DagsterUnavailableError,
    DagsterWebserver,
    backfill_status,
)
from synth_pipelines.submission.errors import SubmissionError
from synth_pipelines.submission.run_requests import pinned_document, read_profile

router = APIRouter(prefix="/v1/runs", tags=["runs"])


class RegradeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    judge: ProfileArgument | None = Field(
        None,
        description="The judge profile: a published org/name@version, or its document; "
        "none: the tasks' own verifiers assess the retained work again.",
    )


def _judge(engine: Engine, judge: str | dict[str, Any] | None) -> PinnedProfile | None:
    if judge is None:
        return None
    if isinstance(judge, dict):
        return pinned_document(judge, "judge profile", "in the request")
    return read_profile(engine, judge, "judge profile")


def _unavailable(error: DagsterUnavailableError) -> ApiError:
    return ApiError("api_error", str(error))


@router.post(
    "/{run_id}/regrades", response_model=RegradeDocument, responses=refusals(400, 403, 404, 500)
)
def regrade(
    run: SteeredRun, body: RegradeRequest, state: State, request: Request
) -> RegradeDocument:
    """Assess the run's retained work again (a backfill of `assessments`); the actor never
    runs. Refused before anything is recorded when a batch has no retained trials or a
    task cannot be regraded."""
    engine, config = state.engine, state.config
    try:
        started = request_regrade(
            engine,
            state.store,
            run,
            _judge(engine, body.judge),
            work_dir=config.work_dir,
            webserver=DagsterWebserver(config.dagster_url),
        )
    except (RegradeRefusedError, SubmissionError) as refused:
        raise ApiError("invalid_request_error", str(refused)) from None
    except DagsterUnavailableError as error:
        raise _unavailable(error) from None
    return RegradeDocument(
        **started.model_dump(),
        backfill_status="requested",
        dagster_url=f"{dagster_ui_url(str(request.base_url))}/runs/b/{started.backfill_id}",
    )


def _regrade_of(engine: Engine, run: RunRecord, regrade_id: str) -> Regrade:
    try:
        found = get_regrade(engine, regrade_id)
    except LookupError:
        found = None
    if found is None or found.run_id != run.run_id:
        raise ApiError("not_found_error", f"no regrade {regrade_id!r} of run {run.run_id} of yours")
    return found


@router.get(
    "/{run_id}/regrades/{regrade_id}/progress",
    response_model=RunProgressDocument,
    responses=refusals(400, 404, 500),
)
def progress(run: ViewedRun, regrade_id: str, state: State) -> RunProgressDocument:
    """The regrade's counts so far (kind "regrade"): batches assessed, attempts counting
    its assessments, status its backfill's as the Dagster webserver reports it."""
    regrade = _regrade_of(state.engine, run, regrade_id)
    if regrade.backfill_id is None:
        # Recorded, but its backfill never launched (`regrade.not_launched` says why).
        status = "NOT_LAUNCHED"
    else:
        try:
            status = backfill_status(
                DagsterWebserver(state.config.dagster_url), regrade.backfill_id
            )
        except DagsterUnavailableError as error:
            raise _unavailable(error) from None
    return regrade_progress(state.engine, regrade, status)
