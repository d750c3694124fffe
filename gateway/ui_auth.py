"""Who is asking for the Dagster UI: an API key in the headers (API clients), or the session
cookie a login link set (a browser, whose websocket cannot send headers).

The UI shows every run of the instance and cannot be narrowed to one owner, so it is the
admins' console: any other key is answered as for a path that does not exist. A cookie's
key is looked up on every request, so revoking the key ends its sessions at their next
request.
"""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.requests import HTTPConnection

from gateway.auth import presented_key
from gateway.state import GatewayState
from synth_pipelines.config import DAGSTER_UI_PATH
from synth_pipelines.contracts.api_errors import ApiError
from synth_pipelines.contracts.operator_key import OperatorKey, allows
from synth_pipelines.control.operator_keys import KeyRefusedError, authenticate, standing_key
from synth_pipelines.control.ui_sessions import session_key_id

UI_COOKIE = "synth_ui_session"
UI_PATH = DAGSTER_UI_PATH


def _key(state: GatewayState, connection: HTTPConnection) -> OperatorKey:
    presented, cookie = presented_key(connection), connection.cookies.get(UI_COOKIE)
    if presented is not None:
        with state.engine.connect() as conn:
            return authenticate(conn, state.config.key_secret, presented)
    if cookie:
        key_id = session_key_id(state.engine, cookie)
        if key_id is None:
            raise KeyRefusedError("the UI session has ended; `synth ui` signs you in again")
        return standing_key(state.engine, key_id)
    raise KeyRefusedError(
        "an API key is required (Authorization: Bearer <key>, or x-api-key), or a UI "
        "session: `synth ui` prints a sign-in link"
    )


def ui_admin(connection: HTTPConnection) -> OperatorKey:
    """The admin's key the request acts as; 401 without one, 404 for anyone else's.

    A plain function: FastAPI runs it on its thread pool, so the lookups never block the
    event loop."""
    state: GatewayState = connection.app.state.gateway
    try:
        key = _key(state, connection)
    except KeyRefusedError as refused:
        raise ApiError("authentication_error", str(refused)) from None
    if not allows(key.role, "admin"):
        raise HTTPException(404)
    return key
