"""`synth ui`: a one-time link that signs a browser in to the Dagster UI, through the gateway.

The UI is the deployment admins' console (it shows every owner's runs), so the gateway
gives the link only for an admin's key. The key itself never goes in a URL: the link
carries a token good once, for a minute, that the gateway trades for a session cookie.
"""

from __future__ import annotations

import typer

from synth_pipelines.cli.gateway_client import GatewayClient
from synth_pipelines.cli.output import JSON_OPTION, console, emit, user_errors
from synth_pipelines.config import Settings


def ui(ctx: typer.Context, as_json: bool = JSON_OPTION) -> None:
    """Print a one-time link that signs a browser in to the Dagster UI (admins' keys)."""
    config: Settings = ctx.obj
    with user_errors():
        login = GatewayClient(config).request("POST", "/v1/ui-sessions")

    def render() -> None:
        console.print(
            f"open this link once, before {login['expires_at']}, to sign in to the Dagster "
            f"UI at {login['ui_url']}:",
            highlight=False,
            soft_wrap=True,
        )
        console.print(login["login_url"], highlight=False, soft_wrap=True)

    emit("ui", login, as_json, render)
