"""Where a local object store's upload grants are used: the grant is the URL, its bytes
the body.

The body streams to a temporary file in the store, hashed as it arrives (a chunk at a
time, off the event loop), and becomes the object only if it is exactly the granted
size and SHA-256 and nothing holds the key yet; so a grant uploads once, and a package
never sits in the gateway's memory whole. The body limit of control requests does not
apply here (`gateway.body_limit`): the grant's size does.
"""

from __future__ import annotations

from anyio import to_thread
from fastapi import APIRouter, Request

from gateway.openapi import refusals
from gateway.state import State
from gateway.upload_grants import verify_grant
from synth_pipelines.contracts.api_errors import ApiError
from synth_pipelines.contracts.upload_grant import GrantClaims, StoredPackage
from synth_pipelines.storage.objectstore import (
    LocalObjectStore,
    ObjectExistsError,
    ObjectIntegrityError,
)

UPLOADS_PREFIX = "/v1/uploads/"
router = APIRouter(prefix=UPLOADS_PREFIX.rstrip("/"), tags=["uploads"])


@router.put(
    "/{grant}",
    name="upload_package",
    response_model=StoredPackage,
    status_code=201,
    responses=refusals(400, 403, 409),
)
async def upload(grant: str, request: Request, state: State) -> StoredPackage:
    """Store the body as the granted object: create-only, exactly the granted size and
    SHA-256. The grant alone authorizes it (it is what an S3 store's presigned URL is
    for one): no API key is sent to where the bytes go."""
    claims = verify_grant(state.config.key_secret, grant)
    store = state.store
    if not isinstance(store, LocalObjectStore):
        raise ApiError(
            "invalid_request_error",
            "this deployment's object store takes packages at their grants' presigned URLs, "
            "not through the gateway",
        )
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) != claims.size:
        raise _wrong_size(claims, f"declares {declared} bytes")
    try:
        incoming = await to_thread.run_sync(store.incoming, claims.key)
    except ObjectExistsError as exists:
        raise ApiError("conflict_error", str(exists)) from None
    try:
        async for chunk in request.stream():
            if incoming.size + len(chunk) > claims.size:
                raise _wrong_size(claims, "is longer")
            await to_thread.run_sync(incoming.write, chunk)
        if incoming.size != claims.size:
            raise _wrong_size(claims, f"has {incoming.size} bytes")
        stored = await to_thread.run_sync(incoming.publish, claims.sha256)
    except ObjectIntegrityError as mismatch:
        raise ApiError("invalid_request_error", str(mismatch)) from None
    except ObjectExistsError as exists:
        raise ApiError("conflict_error", str(exists)) from None
    finally:
        await to_thread.run_sync(incoming.discard)
    return StoredPackage(key=stored.key, sha256=stored.sha256, size=stored.size)


def _wrong_size(claims: GrantClaims, what: str) -> ApiError:
    return ApiError(
        "invalid_request_error",
        f"the body {what}; the grant for {claims.key} is for exactly {claims.size} bytes",
    )
