"""Where a local object store's read grants are used: the grant is the URL, the object's
file the body, streamed from disk a piece at a time (never read whole into memory)."""

from __future__ import annotations

from anyio import to_thread
from fastapi import APIRouter
from fastapi.responses import FileResponse

from gateway.openapi import refusals
from gateway.read_grants import DOWNLOAD_ROUTE, verify_read
from gateway.state import State
from synth_pipelines.contracts.api_errors import ApiError
from synth_pipelines.storage.objectstore import LocalObjectStore, ObjectMissingError

router = APIRouter(prefix="/v1/downloads", tags=["downloads"])


@router.get(
    "/{grant}",
    name=DOWNLOAD_ROUTE,
    response_class=FileResponse,
    responses={
        200: {"content": {"application/octet-stream": {}}, "description": "The object."},
        **refusals(400, 403, 404),
    },
)
async def download(grant: str, state: State) -> FileResponse:
    """The granted object's bytes. The grant alone authorizes it (it is what an S3 store's
    presigned GET is for one): no API key is sent to where the bytes come from."""
    claims = verify_read(state.config.key_secret, grant)
    store = state.store
    if not isinstance(store, LocalObjectStore):
        raise ApiError(
            "invalid_request_error",
            "this deployment's object store serves reads at their grants' presigned URLs, "
            "not through the gateway",
        )
    try:
        path = await to_thread.run_sync(store.file, claims.key)
    except ObjectMissingError as missing:
        raise ApiError("not_found_error", str(missing)) from None
    return FileResponse(path, media_type="application/octet-stream")
