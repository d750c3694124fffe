"""Passing an HTTP exchange through to a service behind the gateway, streamed both ways:
the headers that belong to one connection stay on it, and the answer's body is relayed as
it arrives (a server-sent event stream included), never held whole."""

from __future__ import annotations

import httpx
from fastapi import Request
from fastapi.responses import StreamingResponse
from starlette.background import BackgroundTask

HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer"}
    | {"transfer-encoding", "upgrade", "host", "content-length"}
)


def forwarded_headers(
    request: Request, withheld: frozenset[str] = frozenset()
) -> list[tuple[str, str]]:
    """The request's headers for the service, less this connection's and `withheld`."""
    return [
        (name, value)
        for name, value in request.headers.items()
        if name not in HOP_BY_HOP and name not in withheld
    ]


def relayed(upstream: httpx.Response, origin: str | None = None) -> StreamingResponse:
    """The service's answer, streamed; a redirect to `origin` stays on the gateway."""
    response = StreamingResponse(
        upstream.aiter_raw(),
        status_code=upstream.status_code,
        background=BackgroundTask(upstream.aclose),
    )
    headers = []
    for name, value in upstream.headers.multi_items():
        if name in HOP_BY_HOP - {"content-length"}:
            continue
        if origin is not None and name == "location" and value.startswith(origin):
            value = value.removeprefix(origin) or "/"
        headers.append((name.encode("latin-1"), value.encode("latin-1")))
    response.raw_headers = headers
    return response
