"""The proxy's life: what it starts before it serves, and stops after.

It owns the worker processes, the background evidence publisher and the revocation
follower, and keeps the one `ProxyState` the handlers share on `app.state.proxy`.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from sqlalchemy import Engine

from proxy import worker_calls
from proxy.capture import CaptureSink
from proxy.checkpoint_models import checkpoint_lookup
from proxy.config import ProxyConfig
from proxy.inference_routes import InferenceRoutes
from proxy.metrics import ProxyMetrics
from proxy.revocations import RevokedTokens
from proxy.state import ProxyState
from proxy.token_limits import TokenLimits
from proxy.worker_calls import WorkerConfig
from proxy.workers import CallWorkers
from synth_pipelines.control.database import engine_for
from synth_pipelines.credentials import load_signing_key
from synth_pipelines.evidence.publisher import EvidencePublisher
from synth_pipelines.evidence.spool import Spool
from synth_pipelines.storage.objectstore import open_object_store


@asynccontextmanager
async def lifespan(app: FastAPI, config: ProxyConfig) -> AsyncIterator[None]:
    """`create_app` binds `config`; FastAPI passes `app`."""
    spool = Spool(config.state_dir / "spool")
    # No worker runs yet, so an incomplete staged call is one whose response never
    # completed (the proxy stopped while sampling it).
    spool.discard_incomplete()
    # Before the workers fork: they inherit the engine (and the tables exist by then).
    engine = engine_for(config.database_url)
    workers = _call_workers(config, spool)
    worker_calls.preload(config.registry, [entry.id for entry in config.registry.entries()][:1])
    await workers.start()
    warming = asyncio.ensure_future(workers.freeze())
    state = _proxy_state(config, spool, engine, workers)
    try:
        await warming
        await asyncio.to_thread(state.revocations.refresh)
    except BaseException:
        await workers.shutdown()
        raise
    following = asyncio.create_task(state.revocations.follow())
    state.capture.start()
    # Everything loaded so far lives as long as the server; full collections skip it.
    gc.freeze()
    app.state.proxy = state
    try:
        yield
    finally:
        following.cancel()
        state.capture.stop()
        await workers.shutdown()
        await state.inference.close()


def _call_workers(config: ProxyConfig, spool: Spool) -> CallWorkers:
    return CallWorkers(
        WorkerConfig(
            registry_json=config.registry.to_json(),
            database_url=config.database_url,
            spool_dir=spool.root,
            model_service_url=config.model_service_url,
            model_service_key=config.model_service_key,
            backend_timeout_sec=config.backend_timeout_sec,
        ),
        config.workers,
    )


def _proxy_state(
    config: ProxyConfig, spool: Spool, engine: Engine, workers: CallWorkers
) -> ProxyState:
    store = open_object_store(config.objects_url, endpoint_url=config.s3_endpoint_url)
    publisher = EvidencePublisher(
        spool, store, engine, report=config.report_published, settle_sec=config.evidence_settle_sec
    )
    registry = config.registry.with_checkpoints(checkpoint_lookup(config.database_url))
    return ProxyState(
        config=config,
        registry=registry,
        signing_key=load_signing_key(config.signing_key_path),
        workers=workers,
        capture=CaptureSink(spool, publisher, config.publish_interval_sec),
        metrics=ProxyMetrics(),
        generation=asyncio.Semaphore(config.generation_limit),
        counting=asyncio.Semaphore(config.count_limit),
        engine=engine,
        revocations=RevokedTokens(engine),
        limits=TokenLimits(registry),
        inference=InferenceRoutes(spool, engine, config.backend_timeout_sec),
    )
