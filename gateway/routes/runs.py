"""Runs as their owner sees them: the list, one run's summary, its events (followed over
server-sent events from a cursor).

Another owner's run is answered exactly as a run that does not exist (404), so a refusal
never tells whether it exists.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import StreamingResponse

from gateway.auth import Operator, Viewer
from gateway.event_feeds import EVENT_PAGE, event_frame
from gateway.openapi import refusals
from gateway.owned_runs import ViewedRun
from gateway.routes.dagster import dagster_ui_url
from gateway.state import GatewayState, State
from synth_pipelines.contracts.api_errors import ApiError
from synth_pipelines.contracts.documents import AcceptedRun, RunSummary
from synth_pipelines.contracts.run_event import RunEvent
from synth_pipelines.contracts.run_record import KINDS, STATUSES
from synth_pipelines.contracts.run_submission import RunSubmission
from synth_pipelines.control.events import read_events
from synth_pipelines.control.runs import (
    IdempotencyConflictError,
    list_runs,
)

router = APIRouter(prefix="/v1/runs", tags=["runs"])


@router.get("", response_model=list[RunSummary], responses=refusals(400))
def list_(
    key: Viewer,
    state: State,
    request: Request,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    kind: Annotated[str | None, Query(description=f"One of {', '.join(KINDS)}.")] = None,
    status: Annotated[str | None, Query(description=f"One of {', '.join(STATUSES)}.")] = None,
) -> list[RunSummary]:
    """The key owner's runs, newest first."""
    for name, value, choices in (("kind", kind, KINDS), ("status", status, STATUSES)):
        if value is not None and value not in choices:
            raise ApiError(
                "invalid_request_error", f"{name} {value!r} is not one of {', '.join(choices)}"
            )
    found = list_runs(state.engine, owner=key.owner, limit=limit, kind=kind, status=status)
    ui = dagster_ui_url(str(request.base_url))
    return [RunSummary.of(run, ui) for run in found]


@router.post("", response_model=AcceptedRun, responses=refusals(400, 403, 409))
def start(body: RunSubmission, key: Operator, state: State, request: Request) -> AcceptedRun:
    """Accept a run of the key's owner, in one transaction with its pinned specification,
    its creation event and its idempotency key: the same key with the same request
    answers the same run (`created` false), with another request 409 naming what differs."""
    from synth_pipelines.registry.datasets import DatasetError
    from synth_pipelines.runtime.served_models import ModelNotServedError, ServedModels
    from synth_pipelines.submission.errors import SubmissionError
    from synth_pipelines.submission.run_requests import Submission, submit_run

    config = state.config

    def text(document: str | dict[str, object] | None) -> str | None:
        return json.dumps(document) if isinstance(document, dict) else document

    submission = Submission(
        dataset=body.dataset,
        actor=text(body.actor) or "",
        plan=json.dumps(body.plan),
        judge=text(body.judge),
        model=body.model,
        kinds=tuple(body.kinds),
    )
    models = ServedModels(
        proxy_url=config.proxy_url,
        model_service_url=config.model_service_url,
        model_service_key=config.model_service_key,
        signing_key=lambda: config.signing_key,
        owner=key.owner,
    )
    try:
        run, created = submit_run(
            state.engine,
            submission,
            key.owner,
            body.idempotency_key,
            org=key.org,
            models=models,
        )
    except IdempotencyConflictError as conflict:
        raise ApiError("conflict_error", str(conflict)) from None
    except (SubmissionError, DatasetError, ModelNotServedError) as refused:
        raise ApiError("invalid_request_error", str(refused)) from None
    summary = RunSummary.of(run, dagster_ui_url(str(request.base_url)))
    return AcceptedRun(**summary.model_dump(), created=created)


@router.get("/{run_id}", response_model=RunSummary, responses=refusals(400, 404))
def show(run: ViewedRun, request: Request) -> RunSummary:
    """One of the owner's runs, by its id or a unique prefix of it."""
    return RunSummary.of(run, dagster_ui_url(str(request.base_url)))


@router.get(
    "/{run_id}/events",
    response_model=list[RunEvent],
    responses={200: {"content": {"text/event-stream": {}}}, **refusals(400, 404)},
)
def events(
    run: ViewedRun,
    state: State,
    after: Annotated[int, Query(ge=0, description="The cursor (seq) to resume after.")] = 0,
    follow: Annotated[
        bool, Query(description="Stream events as server-sent events until the run ends.")
    ] = False,
    last_event_id: Annotated[str | None, Header()] = None,
) -> list[RunEvent] | StreamingResponse:
    """The run's events after the cursor, in order; with `follow`, a stream that ends
    once the run has finished and every event is sent (an EventSource reconnecting
    resumes from its `Last-Event-ID`)."""
    if not follow:
        return read_events(state.engine, run_id=run.run_id, after=after, limit=EVENT_PAGE)
    cursor = int(last_event_id) if last_event_id and last_event_id.isdigit() else after
    return StreamingResponse(
        _stream(state, run.run_id, cursor),
        media_type="text/event-stream",
        headers={"cache-control": "no-store", "x-accel-buffering": "no"},
    )


async def _stream(state: GatewayState, run_id: str, cursor: int) -> AsyncIterator[str]:
    keepalive = state.config.keepalive_sec
    async with state.event_feeds.follow(run_id) as feed:
        while True:
            if cursor < feed.start:
                # Older than what the feed holds: this follower catches up on its own.
                found = await asyncio.to_thread(
                    read_events, state.engine, run_id=run_id, after=cursor, limit=EVENT_PAGE
                )
                if not found:
                    cursor = feed.start
                    continue
                cursor = found[-1].seq
                yield "".join(event_frame(event) for event in found)
                continue
            seqs, frames = feed.after(cursor)
            if frames:
                cursor = seqs[-1]
                # One write for all that arrived since the last: fifty followers of a busy
                # run cost fifty writes per poll of the feed, not per event.
                yield "".join(frames)
                continue
            if feed.ended is not None:
                yield f"event: end\ndata: {json.dumps({'status': feed.ended})}\n\n"
                return
            if feed.failed:
                return
            changed = feed.changed
            try:
                await asyncio.wait_for(changed.wait(), keepalive)
            except TimeoutError:
                yield ": keepalive\n\n"
