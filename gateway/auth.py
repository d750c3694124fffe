"""Who is asking: every request carries an operator's API key, and acts as its owner.

The owner of everything a request reads or creates is the key's, never a field the
client sends. A key is looked up on every request, so a revoked one is refused from
the next request on. A route needs a role (`contracts/operator_key.py`): a viewer
reads, an operator also submits and steers, an admin also manages keys.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy import Connection
from starlette.requests import HTTPConnection

from gateway.state import GatewayState, State
from synth_pipelines.contracts.api_errors import ApiError
from synth_pipelines.contracts.operator_key import OperatorKey, Role, allows
from synth_pipelines.control.operator_keys import KeyRefusedError, authenticate


def presented_key(connection: HTTPConnection) -> str | None:
    """The API key the request (or websocket) presents in its headers, if any."""
    key = connection.headers.get("x-api-key")
    if key:
        return key
    scheme, _, value = connection.headers.get("authorization", "").partition(" ")
    return value.strip() if scheme.lower() == "bearer" and value.strip() else None


def operator_key(request: Request, state: State) -> OperatorKey:
    # A plain function: FastAPI runs it on its thread pool, so the lookup never blocks
    # the event loop.
    with state.engine.connect() as conn:
        return key_on(conn, presented_key(request), state)


def key_on(conn: Connection, presented: str | None, state: GatewayState) -> OperatorKey:
    """The key `presented` (as `presented_key` found it), looked up on `conn`: for a route
    that reads more on the same connection (one checkout from the pool, not one per
    lookup)."""
    if presented is None:
        raise ApiError(
            "authentication_error",
            "an API key is required (Authorization: Bearer <key>, or x-api-key); an admin "
            "creates one with `synth admin key create`",
        )
    try:
        return authenticate(conn, state.config.key_secret, presented)
    except KeyRefusedError as refused:
        raise ApiError("authentication_error", str(refused)) from None


def allowed(key: OperatorKey, needed: Role) -> OperatorKey:
    """`key`, if its role is `needed` or above; otherwise 403."""
    if not allows(key.role, needed):
        raise ApiError(
            "permission_error",
            f"this needs a key with role {needed} or above; key {key.key_id} is a {key.role}'s",
        )
    return key


def requires(needed: Role) -> Callable[[OperatorKey], Awaitable[OperatorKey]]:
    # No I/O: on the event loop, where a plain function would cost a hop to the pool.
    async def check(key: Annotated[OperatorKey, Depends(operator_key)]) -> OperatorKey:
        return allowed(key, needed)

    return check


Viewer = Annotated[OperatorKey, Depends(requires("viewer"))]
Operator = Annotated[OperatorKey, Depends(requires("operator"))]
Admin = Annotated[OperatorKey, Depends(requires("admin"))]
