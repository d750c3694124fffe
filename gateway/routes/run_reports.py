"""What a run produced, as its owner reads it: results (`synth run show`), the per-batch
series (`synth run metrics`) and the checkpoints a training run committed.

Results are answered from the document kept with the fingerprint of what it was built
from (`control/run_documents.py`) while nothing it reads has changed, so polling a large
run costs a fingerprint, not a rebuild.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response

from gateway.openapi import refusals
from gateway.owned_runs import ViewedRun, viewed_run_on
from gateway.routes.dagster import dagster_ui_url
from gateway.state import GatewayState, State
from synth_pipelines.contracts.checkpoint import Checkpoint
from synth_pipelines.contracts.documents import (
    AssessmentComparison,
    RunMetricsDocument,
    RunProgressDocument,
    RunResultsDocument,
    printed,
)
from synth_pipelines.control.checkpoints import run_checkpoints
from synth_pipelines.control.run_documents import kept_document, store_run_document
from synth_pipelines.control.runs import get_run
from synth_pipelines.runtime.run_progress import run_progress
from synth_pipelines.runtime.run_reports import (
    assessments_document,
    metrics_document,
    results_document,
)

router = APIRouter(prefix="/v1/runs", tags=["runs"])
JSON = "application/json"


@router.get("/{run_id}/results", response_model=RunResultsDocument, responses=refusals(400, 404))
async def results(run_id: str, state: State, request: Request) -> Response:
    """Status, per-task attempts and rewards, pass rate, what stopped the run and, for a
    training run, what each batch's update did: the document `synth run show --json`
    prints, byte for byte."""
    # The key, the run and the kept document in one hop to the thread pool, where the
    # `ViewedRun` dependency and the route would take two: polls of a run under way are
    # most of what a gateway serves.
    text = await run_in_threadpool(_results_text, run_id, request, state)
    return Response(text, media_type=JSON)


def _results_text(run_id: str, request: Request, state: GatewayState) -> str:
    engine = state.engine
    # The run's Dagster link is on the address this request reached the gateway at, which
    # differs between callers (loopback, `--listen`'s address, a name in front of it), so
    # that address is part of the fingerprint: a caller is never served a document kept
    # with another address in its link, only one built for its own.
    ui = dagster_ui_url(str(request.base_url))
    # One connection for the key, the run and the kept document: each checkout from the
    # pool costs a round trip of its own (the liveness ping) and a transaction.
    with engine.connect() as conn:
        run = viewed_run_on(conn, run_id, request, state)
        fingerprint, text = kept_document(conn, run, state.config.objects_url, ui)
    if text is None:
        document = results_document(engine, state.store, get_run(engine, run.run_id), ui)
        text = printed("run show", document)
        store_run_document(engine, run.run_id, fingerprint, text)
    return text


@router.get("/{run_id}/metrics", response_model=RunMetricsDocument, responses=refusals(400, 404))
def metrics(run: ViewedRun, state: State) -> RunMetricsDocument:
    """One row per batch: attempts, passes and reward mean, and for a training run what
    learning did with them."""
    return metrics_document(state.engine, run)


@router.get("/{run_id}/checkpoints", response_model=list[Checkpoint], responses=refusals(400, 404))
def checkpoints(run: ViewedRun, state: State) -> list[Checkpoint]:
    """The checkpoints a training run committed, one per batch, with their lineage."""
    return run_checkpoints(state.engine, run.run_id)


@router.get(
    "/{run_id}/assessments", response_model=AssessmentComparison, responses=refusals(400, 404)
)
def assessments(run: ViewedRun, state: State) -> AssessmentComparison:
    """Every assessor of the run's work (its regrades) and how often they agree."""
    return assessments_document(state.engine, state.store, run)


@router.get("/{run_id}/progress", response_model=RunProgressDocument, responses=refusals(400, 404))
def progress(run: ViewedRun, state: State) -> RunProgressDocument:
    """The run's counts so far: batches, attempts and passes, the last update's reward."""
    return run_progress(state.engine, run)
