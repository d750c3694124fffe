"""Profile versions: published by an operator as its key's owner, read by anyone with a key."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body

from gateway.auth import Operator, Viewer
from gateway.openapi import refusals
from gateway.state import State
from synth_pipelines.contracts.api_errors import ApiError
from synth_pipelines.contracts.documents import PublishedProfileDocument
from synth_pipelines.contracts.published_profile import PublishedProfile
from synth_pipelines.registry.profiles import (
    ProfileError,
    ProfileNotFoundError,
    get_profile,
    list_profiles,
)
from synth_pipelines.submission.profiles import publish_profile

router = APIRouter(prefix="/v1/profiles", tags=["profiles"])


@router.post("", response_model=PublishedProfileDocument, responses=refusals(400, 403))
def publish(
    document: Annotated[dict[str, Any], Body(description="The profile's JSON document.")],
    key: Operator,
    state: State,
) -> PublishedProfileDocument:
    """Store an immutable profile version as the key's owner: the same bytes again answer
    the stored version (`created` false); other bytes under its `name@version` are refused."""
    try:
        published, created = publish_profile(state.engine, document, key.owner)
    except ProfileError as refused:
        raise ApiError("invalid_request_error", str(refused)) from None
    return PublishedProfileDocument(**published.model_dump(), created=created)


@router.get("", response_model=list[PublishedProfile], responses=refusals(400))
def list_(_key: Viewer, state: State) -> list[PublishedProfile]:
    """Every published profile version, by name, oldest first."""
    try:
        return list_profiles(state.engine)
    except ProfileError as refused:
        raise ApiError("invalid_request_error", str(refused)) from None


@router.get("/{ref:path}", response_model=PublishedProfile, responses=refusals(400, 404))
def show(ref: str, _key: Viewer, state: State) -> PublishedProfile:
    """A profile version (`org/name@version`): its canonical bytes and their digest."""
    try:
        return get_profile(state.engine, ref)
    except ProfileNotFoundError as missing:
        raise ApiError("not_found_error", str(missing)) from None
    except ProfileError as refused:
        raise ApiError("invalid_request_error", str(refused)) from None
