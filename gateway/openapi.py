"""The refusals each gateway operation documents, all in the one error shape.

FastAPI documents its own 422 body for a request that fails validation; the gateway
answers those in the error shape (`gateway.errors`), so every operation names its 422
here, which keeps FastAPI's out of the document.
"""

from __future__ import annotations

from typing import Any

from synth_pipelines.contracts.api_errors import ErrorResponse

_ERRORS: dict[int, str] = {
    400: "invalid_request_error: a value the schema allows but this request cannot use",
    401: "authentication_error: no API key, or one that is malformed, wrong, expired or revoked",
    403: "permission_error: the key's role is below what the operation needs",
    404: "not_found_error: nothing of the key's owner by that name (another owner's is the same)",
    409: "conflict_error: it exists already: the idempotency key's run (accepted for another "
    "request), or the object an upload grant is for",
    413: "request_too_large: the body is over the gateway's limit",
    422: "invalid_request_error: the request does not validate; the message names the field",
    500: "api_error: a service this operation needs did not answer; the message names it",
}


def refusals(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """FastAPI's `responses=` for every request's refusals and the listed ones."""
    return {
        status: {"model": ErrorResponse, "description": _ERRORS[status]}
        for status in sorted({401, 413, 422, *statuses})
    }
