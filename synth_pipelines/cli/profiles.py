"""`synth profile publish|show|list`."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from synth_pipelines.cli.output import JSON_OPTION, console, emit, user_errors
from synth_pipelines.config import Settings
from synth_pipelines.control.database import control_engine
from synth_pipelines.registry.profiles import (
    ProfileError,
    PublishedProfile,
    get_profile,
    list_profiles,
    publish_profile,
)
from synth_pipelines.submission.run_requests import read_json_argument

profile_app = typer.Typer(
    help="Publish and inspect immutable agent profiles.", no_args_is_help=True
)


def _as_dict(published: PublishedProfile) -> dict:
    pinned = published.pinned
    profile = pinned.profile()
    return {
        "ref": f"{pinned.name}@{pinned.version}",
        "name": pinned.name,
        "version": pinned.version,
        "digest": pinned.digest,
        "canonical": pinned.canonical,
        "engine": profile.engine,
        "role": profile.role,
        "owner": published.owner,
        "created_at": published.created_at.isoformat(),
    }


@profile_app.command("publish")
def publish(
    ctx: typer.Context,
    path: Path = typer.Argument(..., help="A profile JSON file."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Store an immutable profile version (republishing different bytes is refused)."""
    config: Settings = ctx.obj
    with user_errors(ProfileError):
        document = read_json_argument(f"@{path}", "profile")
        published, created = publish_profile(control_engine(config), document, config.owner)
    data = {**_as_dict(published), "created": created}
    emit(
        "profile publish",
        data,
        as_json,
        lambda: console.print(
            f"{'published' if created else 'already published (identical bytes)'} "
            f"{data['ref']} {data['digest']}"
        ),
    )


@profile_app.command("show")
def show(
    ctx: typer.Context,
    ref: str = typer.Argument(..., help="org/name@version"),
    as_json: bool = JSON_OPTION,
) -> None:
    """The canonical bytes of a profile version and their digest."""
    with user_errors(ProfileError):
        data = _as_dict(get_profile(control_engine(ctx.obj), ref))

    def render() -> None:
        console.print(f"[bold]{data['ref']}[/] {data['digest']} ({data['engine']}, {data['role']})")
        console.print(data["canonical"], highlight=False, soft_wrap=True)

    emit("profile show", data, as_json, render)


@profile_app.command("list")
def list_(ctx: typer.Context, as_json: bool = JSON_OPTION) -> None:
    """Every published profile version."""
    rows = [_as_dict(p) for p in list_profiles(control_engine(ctx.obj))]

    def render() -> None:
        table = Table("profile", "engine", "role", "digest", "published")
        for column in table.columns:
            column.overflow = "fold"
        for row in rows:
            table.add_row(
                row["ref"],
                row["engine"],
                row["role"],
                row["digest"],
                row["created_at"][:16].replace("T", " "),
            )
        console.print(table)

    emit("profile list", rows, as_json, render)
