"""A request's JSON body as raw bytes, refused before it is read in full when it cannot be one.

The Messages endpoints hand the body to a worker process undecoded, so what is checked here
is only what must be settled before the bytes are taken in: the declared media type, and the
size (the caller's token's limit, `token_limits.py`, never more than Anthropic's own), which
caps the memory and the work one request can cost.
"""

from __future__ import annotations

from collections.abc import Callable

from fastapi import Request

from synth_pipelines.contracts.api_errors import ApiError, invalid_request

MAX_BODY_BYTES = 32 * 1024 * 1024
"""Anthropic's own limit for a Messages request."""


def _too_large(size: str) -> ApiError:
    return ApiError(
        "request_too_large",
        f"request body is {size} bytes, over the proxy's limit of {MAX_BODY_BYTES} bytes "
        "(32 MiB); shorten the conversation or the tool results",
    )


def _check_media_type(request: Request) -> None:
    declared = request.headers.get("content-type")
    if declared is None:
        return
    media_type = declared.partition(";")[0].strip().lower()
    if media_type != "application/json" and not media_type.endswith("+json"):
        raise invalid_request(
            f"content-type {declared!r} is not supported: send the request as JSON with "
            "content-type: application/json"
        )


async def json_body(request: Request, limit: int, too_large: Callable[[str], ApiError]) -> bytes:
    """The body's bytes; a wrong media type is a 400, and a body over `limit` (or over
    `MAX_BODY_BYTES`) the 413 `too_large` makes of its size, unread."""
    _check_media_type(request)
    if limit > MAX_BODY_BYTES:
        limit, too_large = MAX_BODY_BYTES, _too_large
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise too_large(declared)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large(f"more than {limit}")
        chunks.append(chunk)
    return b"".join(chunks)
