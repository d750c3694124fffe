"""`synth profile publish|show|list`, through the gateway."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

import typer
from pydantic import TypeAdapter
from rich.table import Table

from synth_pipelines.cli.gateway_client import GatewayClient
from synth_pipelines.cli.output import JSON_OPTION, console, emit, user_errors
from synth_pipelines.config import Settings
from synth_pipelines.contracts.documents import PublishedProfileDocument
from synth_pipelines.contracts.published_profile import PublishedProfile
from synth_pipelines.submission.run_requests import read_json_argument

profile_app = typer.Typer(
    help="Publish and inspect immutable agent profiles.", no_args_is_help=True
)


@profile_app.command("publish")
def publish(
    ctx: typer.Context,
    path: Path = typer.Argument(..., help="A profile JSON file."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Store an immutable profile version (republishing different bytes is refused)."""
    config: Settings = ctx.obj
    with user_errors():
        document = read_json_argument(f"@{path}", "profile")
        published = PublishedProfileDocument.model_validate(
            GatewayClient(config).request("POST", "/v1/profiles", json=document)
        )
    emit(
        "profile publish",
        published,
        as_json,
        lambda: console.print(
            f"{'published' if published.created else 'already published (identical bytes)'} "
            f"{published.ref} {published.digest}"
        ),
    )


@profile_app.command("show")
def show(
    ctx: typer.Context,
    ref: str = typer.Argument(..., help="org/name@version"),
    as_json: bool = JSON_OPTION,
) -> None:
    """The canonical bytes of a profile version and their digest."""
    with user_errors():
        published = PublishedProfile.model_validate(
            GatewayClient(ctx.obj).request("GET", f"/v1/profiles/{quote(ref, safe='/@')}")
        )

    def render() -> None:
        console.print(
            f"[bold]{published.ref}[/] {published.digest} ({published.engine}, {published.role})"
        )
        console.print(published.canonical, highlight=False, soft_wrap=True)

    emit("profile show", published, as_json, render)


@profile_app.command("list")
def list_(ctx: typer.Context, as_json: bool = JSON_OPTION) -> None:
    """Every published profile version."""
    with user_errors():
        published = TypeAdapter(list[PublishedProfile]).validate_python(
            GatewayClient(ctx.obj).request("GET", "/v1/profiles")
        )

    def render() -> None:
        table = Table("profile", "engine", "role", "digest", "published")
        for column in table.columns:
            column.overflow = "fold"
        for profile in published:
            table.add_row(
                profile.ref,
                profile.engine,
                profile.role,
                profile.digest,
                f"{profile.created_at:%Y-%m-%d %H:%M}",
            )
        console.print(table)

    emit("profile list", published, as_json, render)
