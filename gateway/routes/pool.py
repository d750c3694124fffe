"""The deployment's worker pool: its budget, leases and each organization's admission.

An organization's leases and line name its runs, so a key below admin sees only its own
organization's; the pool's budget and use are the deployment's, shown to every key."""

from __future__ import annotations

from fastapi import APIRouter

from gateway.auth import Viewer
from gateway.openapi import refusals
from gateway.state import State
from synth_pipelines.contracts.operator_key import allows
from synth_pipelines.contracts.pool import PoolDocument
from synth_pipelines.control.pool_document import pool_document

router = APIRouter(prefix="/v1/pool", tags=["pool"])


@router.get("", response_model=PoolDocument, responses=refusals())
def show(key: Viewer, state: State) -> PoolDocument:
    """The pool's limits and use, its held and waiting leases (oldest first), and per
    organization its limits, running and queued runs and active and waiting attempts: every
    organization's to an admin's key, the key's own organization's to any other."""
    pool = state.config.worker_pool
    org = None if allows(key.role, "admin") else key.org
    return pool_document(state.engine, pool.name, pool.limits, org)
