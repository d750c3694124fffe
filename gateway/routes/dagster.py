"""The Dagster UI and its GraphQL API, for admins only, through the gateway.

The webserver listens on loopback under the path prefix `/dagster`, so a path here is the
same path there. Bodies stream through both ways, except a GraphQL request's: it is read
whole (the body limit bounds it) so that the runs it launches are the key's owner's
(`gateway/dagster_launches.py`). The UI's websocket carries only subscriptions (the
webserver subscribes, never executes, what it is sent), so it is passed through as it is,
its key checked again every half minute.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Annotated, Any
from urllib.parse import quote, urlsplit

import httpx
from fastapi import APIRouter, Depends, Request, WebSocket
from fastapi.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.responses import Response
from starlette.websockets import WebSocketState
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed
from websockets.typing import Subprotocol

from gateway.dagster_launches import UnownableLaunchError, owned_launches
from gateway.passthrough import forwarded_headers, relayed
from gateway.state import GatewayState, State
from gateway.ui_auth import UI_PATH, ui_admin
from synth_pipelines.contracts.api_errors import ApiError
from synth_pipelines.contracts.operator_key import OperatorKey

router = APIRouter(include_in_schema=False)
UiAdmin = Annotated[OperatorKey, Depends(ui_admin)]

METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
CREDENTIALS = frozenset({"authorization", "x-api-key", "cookie"})
"""The gateway's business: the webserver never sees a key or a session cookie."""
GRAPHQL = f"{UI_PATH}/graphql"
RECHECK_SEC = 30.0


def dagster_ui_url(gateway_url: str) -> str:
    """The Dagster UI as a client that reached the gateway at `gateway_url` opens it."""
    return gateway_url.rstrip("/") + UI_PATH


def upstream_client() -> httpx.AsyncClient:
    """The pooled client to the webserver: no overall deadline on a streamed answer, only
    on each wait for it."""
    return httpx.AsyncClient(timeout=httpx.Timeout(300.0, connect=10.0), follow_redirects=False)


def _origin(state: GatewayState) -> str:
    address = urlsplit(state.config.dagster_url)
    return f"{address.scheme}://{address.netloc}"


def _checked_path(path: str) -> str:
    """`path`, unless a segment could make it another path upstream than here (an empty,
    `.` or `..` one, which a client library would fold away)."""
    segments = path.removeprefix(UI_PATH).split("/")[1:]
    if "" in segments[:-1] or "." in segments or ".." in segments:
        raise HTTPException(404)
    return path


async def _graphql_body(request: Request, owner: str) -> bytes | None:
    """The GraphQL request as a JSON body with its launches made `owner`'s; None when it
    launches nothing, or is not one the webserver would execute: it goes as it came.

    Read as the webserver reads it (`dagster_webserver/graphql.py`): a GET's query string,
    a POST's JSON or GraphQL body, else its query string."""
    content_type = request.headers.get("content-type", "")
    data: Any
    if request.method == "GET" and "text/html" in request.headers.get("accept", ""):
        return None  # GraphiQL's page: nothing is executed
    if request.method == "POST" and "application/json" in content_type:
        try:
            data = json.loads(await request.body())
        except ValueError:
            return None
    elif request.method == "POST" and "application/graphql" in content_type:
        data = {"query": (await request.body()).decode(errors="replace")}
    elif request.method in ("GET", "POST"):
        data = dict(request.query_params)
    else:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("query"), str):
        return None
    variables = data.get("variables") or {}
    if isinstance(variables, str):
        try:
            variables = json.loads(variables)
        except ValueError:
            return None
    if not isinstance(variables, dict):
        return None
    try:
        owned = owned_launches(data["query"], variables, owner)
    except UnownableLaunchError as refused:
        raise ApiError("invalid_request_error", str(refused)) from None
    if owned is None:
        return None
    query, variables = owned
    body = {"query": query, "variables": variables, "operationName": data.get("operationName")}
    return json.dumps(body).encode()


@router.api_route(UI_PATH, methods=METHODS)
@router.api_route(UI_PATH + "/{rest:path}", methods=METHODS)
async def proxy(request: Request, admin: UiAdmin, state: State) -> Response:
    # The decoded path as it came (`request.url.path` would end it at an encoded `?`).
    path = _checked_path(request.scope["path"])
    origin = _origin(state)
    headers = forwarded_headers(request, CREDENTIALS)
    url = f"{origin}{quote(path)}"
    method = request.method
    content: bytes | AsyncIterator[bytes] | None = None
    owned = await _graphql_body(request, admin.owner) if path == GRAPHQL else None
    if owned is not None:
        method, content = "POST", owned
        headers = [(n, v) for n, v in headers if n != "content-type"]
        headers.append(("content-type", "application/json"))
    else:
        if request.url.query:
            url += f"?{request.url.query}"
        if "content-length" in request.headers or "transfer-encoding" in request.headers:
            content = request.stream()
    try:
        upstream = await state.dagster.send(
            state.dagster.build_request(method, url, headers=headers, content=content),
            stream=True,
        )
    except httpx.TransportError as error:
        raise ApiError(
            "api_error",
            f"the Dagster webserver at {state.config.dagster_url} is not reachable ({error}); "
            "`synth up` starts it",
        ) from None
    return relayed(upstream, origin)


async def _admitted(websocket: WebSocket) -> bool:
    try:
        await run_in_threadpool(ui_admin, websocket)
    except (ApiError, HTTPException):
        return False
    return True


async def _pump_in(websocket: WebSocket, upstream: ClientConnection) -> None:
    while True:
        message = await websocket.receive()
        if message["type"] == "websocket.disconnect":
            return
        text = message.get("text")
        await upstream.send(text if text is not None else message.get("bytes") or b"")


async def _pump_out(websocket: WebSocket, upstream: ClientConnection) -> None:
    async for message in upstream:
        if isinstance(message, str):
            await websocket.send_text(message)
        else:
            await websocket.send_bytes(message)


async def _while_admitted(websocket: WebSocket, _upstream: ClientConnection) -> None:
    while await _admitted(websocket):
        await asyncio.sleep(RECHECK_SEC)


@router.websocket(GRAPHQL)
async def graphql_socket(websocket: WebSocket) -> None:
    if not await _admitted(websocket):
        await websocket.close(code=1008)  # before accepting: the client is refused (403)
        return
    state: GatewayState = websocket.app.state.gateway
    target = "ws" + _origin(state).removeprefix("http") + GRAPHQL
    offered = [Subprotocol(name) for name in websocket.scope.get("subprotocols", [])]
    try:
        async with connect(target, subprotocols=offered or None, open_timeout=10) as upstream:
            await websocket.accept(subprotocol=upstream.subprotocol)
            tasks = [
                asyncio.create_task(pump(websocket, upstream))
                for pump in (_pump_in, _pump_out, _while_admitted)
            ]
            try:
                await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
    except (OSError, ConnectionClosed, TimeoutError):
        pass  # the webserver went away: the browser's socket closes, and it reconnects
    if websocket.client_state != WebSocketState.DISCONNECTED:
        await websocket.close()
