"""The Tinker wire endpoints under /api/v1, as FastAPI routes over the model service.

Request bodies are parsed with the SDK's own pydantic request types, so the server
accepts exactly what the pinned SDK sends; forward_backward arrives as protobuf.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Request, Response
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool
from tinker import types

from synth_pipelines.tinker_local.errors import MissingCredentialsError
from synth_pipelines.tinker_local.json_route import OrjsonRoute
from synth_pipelines.tinker_local.outcomes import Failure, JsonResult, ProtoResult
from synth_pipelines.tinker_local.service import ModelService
from synth_pipelines.tinker_local.wire import parse_forward_backward

POLL_HOLD_SECONDS = 20.0
PROTOBUF = "application/x-protobuf"


# Both dependencies are coroutines: FastAPI runs a plain function dependency on a thread
# pool, a thread hand-off on every request.
async def model_service(request: Request) -> ModelService:
    service: ModelService = request.app.state.model_service
    return service


async def require_service_key(
    request: Request, x_api_key: Annotated[str | None, Header()] = None
) -> None:
    """The service's own key, when it was given one (`synth model serve` gives it
    `TINKER_API_KEY`): only the platform's services, which hold it, reach it, never an
    operator or a sandbox past the proxy's owner checks."""
    expected: str | None = request.app.state.api_key
    if expected is not None and not hmac.compare_digest(
        (x_api_key or "").encode(), expected.encode()
    ):
        raise MissingCredentialsError(
            "X-API-Key is missing or not this model service's key: set TINKER_API_KEY to "
            "the key the deployment gave its services"
        )


async def require_api_key(
    request: Request, x_api_key: Annotated[str | None, Header()] = None
) -> None:
    """A key on every Tinker request (as Tinker's own service asks), the service's own
    when it has one."""
    if not x_api_key:
        raise MissingCredentialsError(
            "missing X-API-Key header: set TINKER_API_KEY to the service's key"
        )
    await require_service_key(request, x_api_key)


Service = Annotated[ModelService, Depends(model_service)]
IdempotencyKey = Annotated[str | None, Header(alias="X-Idempotency-Key")]

router = APIRouter(
    prefix="/api/v1", dependencies=[Depends(require_api_key)], route_class=OrjsonRoute
)
health_router = APIRouter(prefix="/api/v1")


def _once(
    service: ModelService, key: str | None, submit: Callable[[], dict[str, Any]]
) -> dict[str, Any]:
    """Answer a retried submission (same idempotency key) with the request it already made."""
    previous = service.pending.submitted(key)
    if previous is not None:
        return previous
    answer = submit()
    service.pending.remember(key, answer)
    return answer


# Session and client configuration ------------------------------------------------------


@router.post("/client/config")
async def client_config() -> dict[str, Any]:
    return types.ClientConfigResponse(
        pjwt_auth_enabled=False,
        use_pyqwest_transport=False,
        parallel_fwdbwd_chunks=True,
        proto_compress_fwdbwd=False,
        sample_use_retrieve_futures=False,
        custom_loss_server_side=False,
        sample_join_sampling_session=False,
    ).model_dump()


@router.post("/client/dynamic_config")
async def client_dynamic_config() -> dict[str, Any]:
    return types.ClientDynamicConfigResponse().model_dump()


@router.post("/create_session")
async def create_session(body: types.CreateSessionRequest, service: Service) -> dict[str, Any]:
    session = service.registry.new_session()
    return types.CreateSessionResponse(session_id=session.session_id).model_dump()


@router.post("/session_heartbeat")
async def session_heartbeat(body: types.SessionHeartbeatRequest, service: Service) -> Response:
    if not service.registry.active(body.session_id):
        return JSONResponse(
            {"error": f"session {body.session_id} is not active", "category": "user"},
            status_code=410,
        )
    return JSONResponse(types.SessionHeartbeatResponse().model_dump())


@router.post("/sessions/{session_id}/finish")
async def finish_session(session_id: str, service: Service) -> dict[str, Any]:
    service.registry.finish(session_id)
    return {}


@router.post("/telemetry")
async def telemetry() -> dict[str, str]:
    return {"status": "accepted"}


@router.get("/get_server_capabilities")
async def server_capabilities(service: Service) -> dict[str, Any]:
    """Every model the service serves, loaded or not: each can be sampled and trained.
    A context length is only known once a model is loaded."""
    loaded = {model.backbone.name: model.backbone for model in service.models.loaded()}
    return types.GetServerCapabilitiesResponse(
        supported_models=[
            types.SupportedModel(
                model_name=name,
                max_context_length=loaded[name].max_context if name in loaded else None,
                trainable=True,
                sampleable=True,
            )
            for name in service.models.served()
        ]
    ).model_dump()


@health_router.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


# Futures ---------------------------------------------------------------------------------


@router.post("/retrieve_future")
async def retrieve_future(body: types.FutureRetrieveRequest, service: Service) -> Response:
    try:
        outcome = await service.pending.wait(body.request_id, POLL_HOLD_SECONDS)
    except KeyError:
        return JSONResponse(
            {
                "error": f"unknown request {body.request_id}: it was already retrieved, or the "
                "model service restarted",
                "category": "user",
            },
            status_code=410,
        )
    if outcome is None:
        return JSONResponse(
            {"type": "try_again", "request_id": body.request_id, "queue_state": "active"}
        )
    if isinstance(outcome, ProtoResult):
        return Response(outcome.body, media_type=PROTOBUF)
    if isinstance(outcome, JsonResult):
        return JSONResponse(outcome.body)
    assert isinstance(outcome, Failure)
    return JSONResponse(outcome.body())


# Training ----------------------------------------------------------------------------------


@router.post("/create_model")
async def create_model(
    body: types.CreateModelRequest, service: Service, key: IdempotencyKey = None
) -> dict[str, Any]:
    await run_in_threadpool(service.prepare_base_model, body.base_model)
    return _once(service, key, lambda: service.create_model(body))


@router.post("/get_info")
async def get_info(body: types.GetInfoRequest, service: Service) -> dict[str, Any]:
    return service.get_info(body.model_id).model_dump()


@router.post("/forward_backward")
async def forward_backward(
    request: Request, service: Service, key: IdempotencyKey = None
) -> dict[str, Any]:
    call = parse_forward_backward(await request.body())
    return _once(service, key, lambda: service.forward_backward(call))


@router.post("/optim_step")
async def optim_step(
    body: types.OptimStepRequest, service: Service, key: IdempotencyKey = None
) -> dict[str, Any]:
    return _once(service, key, lambda: service.optim_step(body))


@router.post("/save_weights")
async def save_weights(
    body: types.SaveWeightsRequest, service: Service, key: IdempotencyKey = None
) -> dict[str, Any]:
    return _once(service, key, lambda: service.save_weights(body))


@router.post("/save_weights_for_sampler")
async def save_weights_for_sampler(
    body: types.SaveWeightsForSamplerRequest, service: Service, key: IdempotencyKey = None
) -> dict[str, Any]:
    return _once(service, key, lambda: service.save_weights_for_sampler(body))


@router.post("/load_weights")
async def load_weights(
    body: types.LoadWeightsRequest, service: Service, key: IdempotencyKey = None
) -> dict[str, Any]:
    if body.session_id is not None:
        await run_in_threadpool(service.prepare_base_model, body.base_model, body.path)
    return _once(service, key, lambda: service.load_weights(body))


# Sampling ----------------------------------------------------------------------------------


@router.post("/create_sampling_session")
async def create_sampling_session(
    body: types.CreateSamplingSessionRequest, service: Service
) -> dict[str, Any]:
    # Reading a checkpoint may go to S3: keep it off the event loop.
    sampler_id = await run_in_threadpool(service.create_sampling_session, body)
    return types.CreateSamplingSessionResponse(sampling_session_id=sampler_id).model_dump()


@router.get("/samplers/{sampler_id}")
async def get_sampler(sampler_id: str, service: Service) -> dict[str, Any]:
    return service.get_sampler(sampler_id).model_dump()


@router.post("/asample")
async def asample(
    body: types.SampleRequest, service: Service, key: IdempotencyKey = None
) -> dict[str, Any]:
    return _once(service, key, lambda: service.asample(body))
