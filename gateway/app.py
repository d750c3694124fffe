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
from gateway.routes import keys, operations, runs, sessions
from gateway.state import GatewayState
from synth_pipelines.control.database import create_tables, engine_for


def create_app(config: GatewayConfig) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine = engine_for(config.database_url)
        create_tables(engine)
        app.state.gateway = GatewayState(config=config, engine=engine)
        yield

    app = FastAPI(title="synth gateway", version="1", lifespan=lifespan)
    app.include_router(operations.router)
    app.include_router(keys.router)
    app.include_router(runs.router)
    app.include_router(sessions.router)
    install_error_handlers(app)
    app.add_middleware(BodyLimit, limit=config.max_body_bytes)
    return app
