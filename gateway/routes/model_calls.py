"""The capture proxy, reached through the gateway: a harness on an operator's machine
(`synth claude`, `synth agent run`) sends its model calls to the gateway's `/anthropic`,
and they go on, streamed both ways, to the proxy, which checks the session token they
carry as it checks any other. So an operator's machine needs only the gateway's address.
"""

from __future__ import annotations

import httpx
from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from gateway.passthrough import forwarded_headers, relayed
from gateway.state import State
from synth_pipelines.contracts.api_errors import ApiError

MODEL_CALLS_PREFIX = "/anthropic"
router = APIRouter(prefix=MODEL_CALLS_PREFIX, include_in_schema=False)


def model_calls_url(gateway_url: str) -> str:
    """Where a harness that reached the gateway at `gateway_url` sends its model calls."""
    return gateway_url.rstrip("/") + MODEL_CALLS_PREFIX


@router.api_route("/{path:path}", methods=["GET", "POST"])
async def forward(path: str, request: Request, state: State) -> StreamingResponse:
    # The proxy answers for the token (401, 403, 404 as it does for any caller): the
    # gateway adds no key of its own, so it grants nothing the token does not.
    url = f"{state.config.proxy_url}/{path}"
    if request.url.query:
        url += f"?{request.url.query}"
    content = request.stream() if request.method == "POST" else None
    try:
        upstream = await state.model_calls.send(
            state.model_calls.build_request(
                request.method, url, headers=forwarded_headers(request), content=content
            ),
            stream=True,
        )
    except httpx.TransportError as error:
        raise ApiError(
            "api_error", f"the capture proxy at {state.config.proxy_url} is not reachable ({error})"
        ) from None
    return relayed(upstream)
