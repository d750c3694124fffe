"""What a run produced, as its owner reads it: results (`synth run show`), the per-batch
series (`synth run metrics`) and the checkpoints a training run committed.

Results are answered from the document kept with the fingerprint of what it was built
from (`control/run_documents.py`) while nothing it reads has changed, so polling a large
run costs a fingerprint, not a rebuild.
"""

from __future__ import annotations

from functools import partial

from fastapi import APIRouter, Request
from fastapi.responses import Response

from gateway.auth import presented_key
from gateway.openapi import refusals
from gateway.owned_runs import ViewedRun, run_of_key
from gateway.routes.dagster import dagster_ui_url
from gateway.shared_reads import Answers
from gateway.state import GatewayState, State
from synth_pipelines.contracts.api_errors import ApiError
from synth_pipelines.contracts.checkpoint import Checkpoint
from synth_pipelines.contracts.documents import (
    AssessmentComparison,
    RunMetricsDocument,
    RunProgressDocument,
    RunResultsDocument,
    printed,
)
from synth_pipelines.contracts.run_record import RunRecord
from synth_pipelines.contracts.worker_attempt import WorkerAttempt
from synth_pipelines.control.checkpoints import run_checkpoints
from synth_pipelines.control.run_documents import kept_document, store_run_document
from synth_pipelines.control.runs import get_run
from synth_pipelines.control.worker_attempts import run_worker_attempts
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
    # The run's Dagster link is on the address this request reached the gateway at, which
    # differs between callers (loopback, `--listen`'s address, a name in front of it), so
    # that address is part of the fingerprint: a caller is never served a document kept
    # with another address in its link, only one built for its own.
    ui = dagster_ui_url(str(request.base_url))
    # The key, the run and the kept document in one hop to the thread pool, shared by the
    # polls of the same run that arrive together: polls of a run under way are most of
    # what a gateway serves.
    text = await state.shared_reads.answer(
        (run_id, ui), presented_key(request), partial(_results_texts, run_id, ui, state)
    )
    return Response(text, media_type=JSON)


def _results_texts(
    run_id: str, ui: str, state: GatewayState, presented: list[str | None]
) -> Answers:
    """The document of the `{run_id}` run of each presented key's owner, or its refusal."""
    engine = state.engine
    answers: Answers = {}
    found: dict[str, tuple[RunRecord, str, str | None]] = {}
    # One connection for the keys, the runs and the kept documents: each checkout from
    # the pool costs a transaction (and on PostgreSQL a liveness ping) of its own.
    with engine.connect() as conn:
        runs: dict[str | None, str] = {}
        for key in presented:
            try:
                run = run_of_key(conn, run_id, key, state, "viewer")
            except ApiError as refused:
                answers[key] = refused
                continue
            runs[key] = run.run_id
            if run.run_id not in found:
                fingerprint, text = kept_document(conn, run, state.config.objects_url, ui)
                found[run.run_id] = (run, fingerprint, text)
    texts = {}
    for run, fingerprint, text in found.values():
        if text is None:
            document = results_document(engine, state.store, get_run(engine, run.run_id), ui)
            text = printed("run show", document)
            store_run_document(engine, run.run_id, fingerprint, text)
        texts[run.run_id] = text
    answers.update({key: texts[run] for key, run in runs.items()})
    return answers


@router.get("/{run_id}/metrics", response_model=RunMetricsDocument, responses=refusals(400, 404))
def metrics(run: ViewedRun, state: State) -> RunMetricsDocument:
    """One row per batch: attempts, passes and reward mean, and for a training run what
    learning did with them."""
    return metrics_document(state.engine, run)


@router.get("/{run_id}/checkpoints", response_model=list[Checkpoint], responses=refusals(400, 404))
def checkpoints(run: ViewedRun, state: State) -> list[Checkpoint]:
    """The checkpoints a training run committed, one per batch, with their lineage."""
    return run_checkpoints(state.engine, run.run_id)


@router.get("/{run_id}/workers", response_model=list[WorkerAttempt], responses=refusals(400, 404))
def workers(run: ViewedRun, state: State) -> list[WorkerAttempt]:
    """Every claim of the run's batches: the worker, its attempt number, and how it ended
    (completed, released, cancelled, superseded after its lease ran out, interrupted)."""
    return run_worker_attempts(state.engine, run.run_id)


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
