"""The key owner's checkpoints, and one checkpoint's lineage: what produced it, and what
sampled through it since (`synth checkpoint list|show`). Another owner's checkpoint is
answered exactly as one never recorded (404)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from gateway.auth import Viewer
from gateway.openapi import refusals
from gateway.owned_runs import owned
from gateway.state import State
from synth_pipelines.contracts.api_errors import ApiError
from synth_pipelines.contracts.checkpoint import Checkpoint
from synth_pipelines.contracts.checkpoint_lineage import CheckpointLineage
from synth_pipelines.control.checkpoint_lineage import (
    AmbiguousCheckpointError,
    CheckpointNotFoundError,
    checkpoint_lineage,
    owner_checkpoints,
    resolve_checkpoint,
)

router = APIRouter(prefix="/v1/checkpoints", tags=["checkpoints"])


@router.get("", response_model=list[Checkpoint], responses=refusals(400, 404))
def list_(
    key: Viewer,
    state: State,
    run: Annotated[
        str | None, Query(description="Only the checkpoints of this run (its id or a prefix).")
    ] = None,
) -> list[Checkpoint]:
    """The owner's checkpoints, oldest first; the path is what `--model` takes."""
    run_id = None
    if run is not None:
        with state.engine.connect() as conn:
            run_id = owned(conn, run, key.owner).run_id
    return owner_checkpoints(state.engine, key.owner, run_id)


@router.get("/{checkpoint:path}", response_model=CheckpointLineage, responses=refusals(400, 404))
def show(checkpoint: str, key: Viewer, state: State) -> CheckpointLineage:
    """One checkpoint, by its tinker:// path or a unique prefix or suffix of it: its
    producing run and batch, the sampling groups recorded against it, and every run that
    selected it."""
    try:
        found = resolve_checkpoint(state.engine, key.owner, checkpoint)
    except CheckpointNotFoundError as unknown:
        raise ApiError("not_found_error", str(unknown)) from None
    except AmbiguousCheckpointError as ambiguous:
        raise ApiError("invalid_request_error", str(ambiguous)) from None
    return checkpoint_lineage(state.engine, state.store, found)
