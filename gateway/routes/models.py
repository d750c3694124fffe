"""The models the capture proxy serves (`synth model list`): the built-in ones and the
deployment's registry file's, each with its family, limits, route and whether it can be
trained. A checkpoint is sampled by its path (`synth run checkpoints`), never listed here,
so no owner's checkpoint is shown to another."""

from __future__ import annotations

from fastapi import APIRouter

from gateway.auth import Viewer
from gateway.openapi import refusals
from gateway.state import State
from synth_pipelines.contracts.api_errors import ApiError
from synth_pipelines.contracts.documents import ServedModelDocument
from synth_pipelines.rendering.model_registry import served_registry

router = APIRouter(prefix="/v1/models", tags=["models"])


@router.get("", response_model=list[ServedModelDocument], responses=refusals(500))
def list_(_key: Viewer, state: State) -> list[ServedModelDocument]:
    """Every served model, as the proxy's `GET /v1/models` lists it; a registry file that
    does not parse is the deployment's fault (500), naming what is wrong with it."""
    config = state.config
    try:
        # Read on each request, as the proxy reads it at its start: an edited file shows.
        registry = served_registry(config.teacher_service_url, config.model_registry)
    except ValueError as invalid:
        raise ApiError("api_error", str(invalid)) from None
    shown = set(ServedModelDocument.model_fields)
    return [
        ServedModelDocument.model_validate(info.model_dump(include=shown))
        for info in registry.model_list().data
    ]
