"""A run's table as a file (`synth run export`): built for the run's owner by a process
of its own (`export_jobs.py`), stored under the run, and answered with a read grant for
its bytes, which never pass through here."""

from __future__ import annotations

from fastapi import APIRouter, Request

from gateway.auth import Viewer
from gateway.openapi import refusals
from gateway.owned_runs import ViewedRun
from gateway.read_grants import grant_read
from gateway.state import State
from synth_pipelines.contracts.run_export import ExportRequest, RunExport

router = APIRouter(prefix="/v1/runs", tags=["runs"])


@router.post("/{run_id}/exports", response_model=RunExport, responses=refusals(400, 404, 500))
async def export(
    run: ViewedRun, body: ExportRequest, key: Viewer, state: State, request: Request
) -> RunExport:
    """One of the run's tables (outcomes, assessments or captured evidence) as a Parquet
    or CSV file, and a short-lived grant to download it. Evidence that fails its
    integrity check exports nothing (500)."""
    exported, stored = await state.exports.export(run.run_id, body)
    return RunExport(
        **exported.model_dump(), download=grant_read(state, request, key.owner, run, stored)
    )
