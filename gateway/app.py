"""The gateway: the control plane operators reach the platform through.

Every request is made with an operator's API key and acts as that key's owner
(`gateway.auth`); what it reads or creates is that owner's. Refusals share the proxy's
error shape (`gateway.errors`); bodies are bounded (`gateway.body_limit`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from gateway.body_limit import BodyLimit
from gateway.config import GatewayConfig
from gateway.errors import install_error_handlers
from gateway.event_feeds import EventFeeds
from gateway.export_jobs import ExportSlots
from gateway.routes import (
    attempts,
    checkpoints,
    dagster,
    datasets,
    downloads,
    keys,
    model_calls,
    models,
    operations,
    orgs,
    policy_updates,
    pool,
    profiles,
    regrades,
    run_exports,
    run_reports,
    run_steering,
    runs,
    sessions,
    ui_sessions,
    uploads,
)
from gateway.routes.dagster import upstream_client
from gateway.shared_reads import SharedReads
from gateway.state import GatewayState
from synth_pipelines.control.database import create_tables, engine_for
from synth_pipelines.storage.objectstore import open_object_store


def create_app(config: GatewayConfig) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine = engine_for(config.database_url)
        create_tables(engine)
        store = open_object_store(config.objects_url, endpoint_url=config.s3_endpoint_url)
        async with upstream_client() as dagster, upstream_client() as model_calls:
            app.state.gateway = GatewayState(
                config=config,
                engine=engine,
                store=store,
                dagster=dagster,
                model_calls=model_calls,
                event_feeds=EventFeeds(engine, config.event_poll_sec),
                exports=ExportSlots(config),
                shared_reads=SharedReads(config.results_gather_sec, config.results_hot_polls),
            )
            yield

    app = FastAPI(title="synth gateway", version="1", lifespan=lifespan)
    # A request is matched against the routes in the order they were included, and polls
    # of a run's results are most of what a gateway serves: their routes come first (no
    # other route's path matches theirs).
    app.include_router(run_reports.router)
    app.include_router(operations.router)
    app.include_router(keys.router)
    app.include_router(orgs.router)
    app.include_router(pool.router)
    app.include_router(runs.router)
    app.include_router(run_steering.router)
    app.include_router(run_exports.router)
    app.include_router(attempts.router)
    app.include_router(models.router)
    app.include_router(downloads.router)
    app.include_router(policy_updates.router)
    app.include_router(regrades.router)
    app.include_router(checkpoints.router)
    app.include_router(sessions.router)
    app.include_router(ui_sessions.router)
    app.include_router(dagster.router)
    app.include_router(datasets.router)
    app.include_router(uploads.router)
    app.include_router(profiles.router)
    app.include_router(model_calls.router)
    install_error_handlers(app)
    app.add_middleware(
        BodyLimit,
        limit=config.max_body_bytes,
        # The proxy holds model calls to limits of its own.
        bounded_by_route=(uploads.UPLOADS_PREFIX, model_calls.MODEL_CALLS_PREFIX + "/"),
    )
    return app
