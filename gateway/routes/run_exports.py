"""A run's table as a file (`synth run export`): built for the run's owner, stored under
the run, and answered with a read grant for its bytes, which never pass back through
here."""

from __future__ import annotations

from fastapi import APIRouter, Request

from gateway.auth import Viewer
from gateway.openapi import refusals
from gateway.owned_runs import ViewedRun
from gateway.read_grants import grant_read
from gateway.state import State
from synth_pipelines.contracts.api_errors import ApiError
from synth_pipelines.contracts.run_export import ExportRequest, RunExport
from synth_pipelines.runtime.run_exports import export_table
from synth_pipelines.runtime.run_tables import EvidenceUnreadableError

router = APIRouter(prefix="/v1/runs", tags=["runs"])


@router.post("/{run_id}/exports", response_model=RunExport, responses=refusals(400, 404, 500))
def export(
    run: ViewedRun, body: ExportRequest, key: Viewer, state: State, request: Request
) -> RunExport:
    """One of the run's tables (outcomes, assessments or captured evidence) as a Parquet
    or CSV file, and a short-lived grant to download it. Evidence that fails its
    integrity check exports nothing (500)."""
    try:
        exported, stored = export_table(state.engine, state.store, run, body.what, body.format)
    except EvidenceUnreadableError as unreadable:
        raise ApiError("api_error", str(unreadable)) from None
    return RunExport(
        **exported.model_dump(), download=grant_read(state, request, key.owner, run, stored)
    )
