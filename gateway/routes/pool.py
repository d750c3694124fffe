"""The deployment's worker pool: its budget, leases and each organization's admission."""

from __future__ import annotations

from fastapi import APIRouter

from gateway.auth import Viewer
from gateway.openapi import refusals
from gateway.state import State
from synth_pipelines.contracts.pool import PoolDocument
from synth_pipelines.control.pool_document import pool_document

router = APIRouter(prefix="/v1/pool", tags=["pool"])


@router.get("", response_model=PoolDocument, responses=refusals())
def show(_viewer: Viewer, state: State) -> PoolDocument:
    """The pool's limits and use, its held and waiting leases (oldest first), and per
    organization its limits, running and queued runs and active and waiting attempts."""
    pool = state.config.worker_pool
    return pool_document(state.engine, pool.name, pool.limits)
