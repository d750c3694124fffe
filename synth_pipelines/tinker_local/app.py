"""The FastAPI application of the local Tinker-compatible model service."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import torch
from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from synth_pipelines.rendering.model_names import DEFAULT_MAX_LOADED, QWEN3_TINY
from synth_pipelines.storage.objectstore import open_object_store
from synth_pipelines.tinker_local.api import health_router, require_service_key, router
from synth_pipelines.tinker_local.backbone import check_base_model
from synth_pipelines.tinker_local.base_models import BaseModels
from synth_pipelines.tinker_local.checkpoints import CheckpointStore
from synth_pipelines.tinker_local.errors import MissingCredentialsError, NotFoundError, UserError
from synth_pipelines.tinker_local.scripted import Script, script_router
from synth_pipelines.tinker_local.service import ModelService


def create_app(
    base_models: str | Sequence[str] = (QWEN3_TINY,),
    *,
    scripted: bool = False,
    object_store_url: str,
    s3_endpoint_url: str | None = None,
    device: str | None = None,
    max_loaded: int = DEFAULT_MAX_LOADED,
    api_key: str | None = None,
) -> FastAPI:
    """The service for `base_models` and every seeded model, checkpoints in the object
    store at `object_store_url` (`s3_endpoint_url`: an S3-compatible server's). The first
    named model is loaded at start, the others on first use; an unknown name is refused
    here.

    `scripted=True` is the only way to get scripted sampling (tests of other parts).
    With `api_key`, every request but the health check must carry it (`X-API-Key`);
    without, any key is taken (an in-process service a test holds alone).
    """
    names = [base_models] if isinstance(base_models, str) else list(base_models)
    for name in names:
        check_base_model(name)
    models = BaseModels(
        names, device=torch.device(device) if device else None, max_loaded=max_loaded
    )
    store = open_object_store(object_store_url, endpoint_url=s3_endpoint_url)
    script = Script() if scripted else None
    service = ModelService(models, CheckpointStore(store), script)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        service.start()
        try:
            yield
        finally:
            service.stop()

    app = FastAPI(title="synth local Tinker service", lifespan=lifespan)
    app.state.model_service = service
    app.state.api_key = api_key
    app.include_router(health_router)
    app.include_router(router)
    if script is not None:
        app.include_router(script_router(script), dependencies=[Depends(require_service_key)])
    app.add_exception_handler(UserError, _user_error)
    app.add_exception_handler(RequestValidationError, _invalid_request)
    return app


async def _user_error(request: Request, error: Exception) -> JSONResponse:
    status = 400
    if isinstance(error, NotFoundError):
        status = 404
    elif isinstance(error, MissingCredentialsError):
        status = 401
    return JSONResponse({"error": str(error), "category": "user"}, status_code=status)


async def _invalid_request(request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, RequestValidationError)
    problems = "; ".join(
        f"{'.'.join(str(part) for part in problem['loc'])}: {problem['msg']}"
        for problem in error.errors()
    )
    return JSONResponse(
        {"error": f"invalid request to {request.url.path}: {problems}", "category": "user"},
        status_code=400,
    )
