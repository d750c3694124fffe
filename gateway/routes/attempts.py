"""One attempt of the owner's runs, as `synth attempt show` prints it: its conversation
from the captured evidence, and its grade. The document holds what a page of it needs
(the verifier's output is cut to its end), so no bytes are granted besides.

Another owner's attempt is answered exactly as one that does not exist (404).
"""

from __future__ import annotations

from fastapi import APIRouter

from gateway.auth import Viewer
from gateway.openapi import refusals
from gateway.state import State
from synth_pipelines.contracts.api_errors import ApiError
from synth_pipelines.contracts.documents import AttemptDocument
from synth_pipelines.runtime.attempt_view import (
    AmbiguousAttemptError,
    AttemptNotFoundError,
    attempt_document,
    resolve_attempt,
)

router = APIRouter(prefix="/v1/attempts", tags=["attempts"])


@router.get("/{attempt}", response_model=AttemptDocument, responses=refusals(400, 404))
def show(attempt: str, key: Viewer, state: State) -> AttemptDocument:
    """A finished attempt of the key owner's, by its id or a unique prefix of it."""
    try:
        attempt_id, batch = resolve_attempt(state.engine, key.owner, attempt)
        return attempt_document(state.engine, state.store, attempt_id, batch)
    except AttemptNotFoundError as missing:
        raise ApiError("not_found_error", str(missing)) from None
    except AmbiguousAttemptError as ambiguous:
        raise ApiError("invalid_request_error", str(ambiguous)) from None
