"""Signing a browser in to the Dagster UI without a key in any URL.

An admin's key asks for a login link (`synth ui`); the link is good once, for a minute.
Visiting it sets the session cookie (HttpOnly, SameSite=Strict, Secure over HTTPS, sent
only under the UI's path) and goes on to the UI.
"""

from __future__ import annotations

from datetime import UTC, datetime

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from gateway.auth import Admin
from gateway.openapi import refusals
from gateway.routes.dagster import dagster_ui_url
from gateway.state import State
from gateway.ui_auth import UI_COOKIE, UI_PATH
from synth_pipelines.contracts.api_errors import ApiError
from synth_pipelines.contracts.ui_session import UiLogin
from synth_pipelines.control.ui_sessions import create_login, redeem_login

router = APIRouter(tags=["ui"])

# The browser goes on from a page of this site, not by a redirect: a SameSite=Strict
# cookie set on a navigation that began on another site (a terminal, a chat) is not sent
# on the redirect that ends it.
_SIGNED_IN = f"""<!doctype html>
<html><head><meta charset="utf-8"><meta http-equiv="refresh" content="0;url={UI_PATH}/">
<title>Signed in</title></head>
<body><p>Signed in. <a href="{UI_PATH}/">Open the Dagster UI</a>.</p></body></html>
"""


@router.post("/v1/ui-sessions", response_model=UiLogin, status_code=201, responses=refusals(403))
def create(key: Admin, state: State, request: Request) -> UiLogin:
    """A one-time link that signs a browser in to the Dagster UI as this key."""
    token, expires_at = create_login(state.engine, key.key_id, state.config.ui_login_ttl_sec)
    return UiLogin(
        login_url=str(request.url_for("ui_login", token=token)),
        ui_url=f"{dagster_ui_url(str(request.base_url))}/",
        expires_at=datetime.fromtimestamp(expires_at, UTC),
    )


@router.get("/ui-login/{token}", name="ui_login", include_in_schema=False)
def login(token: str, state: State, request: Request) -> HTMLResponse:
    ttl = state.config.ui_session_ttl_sec
    cookie = redeem_login(state.engine, token, ttl)
    if cookie is None:
        raise ApiError(
            "authentication_error",
            "this sign-in link was used already or has expired; `synth ui` prints a new one",
        )
    page = HTMLResponse(
        _SIGNED_IN, headers={"cache-control": "no-store", "referrer-policy": "no-referrer"}
    )
    page.set_cookie(
        UI_COOKIE,
        cookie,
        max_age=int(ttl),
        path=UI_PATH,
        secure=request.url.scheme == "https",
        httponly=True,
        samesite="strict",
    )
    return page
