"""Read grants (`contracts/read_grant.py`): signed here, for objects under the owner's
runs only, and checked where a local store's bytes are streamed (`routes/downloads.py`).

An S3 store's grant is its own presigned GET (signature version 4), which the store
checks; a local store's is the gateway's download URL with the signed claims in it.
Either way the bytes go from the store to the operator, never through the gateway's
memory.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from fastapi import Request

from gateway.signed_claims import SignatureRefusedError, sign, standing
from gateway.state import GatewayState
from synth_pipelines.contracts.api_errors import ApiError
from synth_pipelines.contracts.read_grant import ReadClaims, ReadGrant
from synth_pipelines.contracts.run_record import RunRecord
from synth_pipelines.storage.objectstore import LocalObjectStore, ObjectRef, S3ObjectStore

_LABEL = b"synth read grant v1\0"
DOWNLOAD_ROUTE = "download_object"


def run_objects(run: RunRecord) -> str:
    """The prefix of every object a run's work is stored under."""
    return f"runs/{run.run_id}/"


def grant_read(
    state: GatewayState, request: Request, owner: str, run: RunRecord, ref: ObjectRef
) -> ReadGrant:
    """A grant for `owner` to read `ref`, an object of `run`, which must be `owner`'s
    (else 404, the same as for a run that does not exist)."""
    if run.owner != owner or not ref.key.startswith(run_objects(run)):
        raise ApiError("not_found_error", f"no object {ref.key!r} of yours")
    expires_at = datetime.now(UTC) + timedelta(seconds=state.config.read_grant_sec)
    claims = ReadClaims(
        owner=owner, key=ref.key, sha256=ref.sha256, size=ref.size, expires_at=expires_at
    )
    store = state.store
    if isinstance(store, S3ObjectStore):
        url = store.presigned_get(ref.key, state.config.read_grant_sec)
    elif isinstance(store, LocalObjectStore):
        url = str(request.url_for(DOWNLOAD_ROUTE, grant=sign_read(state.config.key_secret, claims)))
    else:
        raise ApiError("api_error", f"the object store {store.url} cannot grant reads")
    return ReadGrant(key=ref.key, sha256=ref.sha256, size=ref.size, url=url, expires_at=expires_at)


def sign_read(secret: bytes, claims: ReadClaims) -> str:
    return sign(secret, _LABEL, claims)


def verify_read(secret: bytes, grant: str, now: datetime | None = None) -> ReadClaims:
    """The claims of a read grant the gateway signed and that has not expired; anything
    else is refused (403), naming why."""
    try:
        return standing(secret, _LABEL, grant, ReadClaims, now)
    except SignatureRefusedError as refused:
        raise _refused(str(refused)) from None


def _refused(reason: str) -> ApiError:
    return ApiError(
        "permission_error",
        f"read grant refused: {reason}; run the command again for a new one",
    )
