"""GET /v1/models[/{id}]: the models this proxy serves, as Anthropic lists them."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from proxy.auth import Authenticated
from proxy.openapi import error_responses
from proxy.state import State

router = APIRouter()


@router.get("/v1/models", responses=error_responses(401))
async def models(_who: Authenticated, state: State) -> dict[str, Any]:
    return state.registry.model_list().model_dump()


@router.get("/v1/models/{model_id:path}", responses=error_responses(401, 403, 404))
async def model(model_id: str, who: Authenticated, state: State) -> dict[str, Any]:
    who.check_checkpoint_owner(state.registry, model_id)
    return state.registry.get(model_id).model_info().model_dump()
