"""`synth admin key create|list|revoke` (operators' API keys) and `synth admin org limits`
(organizations' admission limits), through the gateway."""

from __future__ import annotations

import re

import typer

from synth_pipelines.cli.gateway_client import GatewayClient
from synth_pipelines.cli.output import JSON_OPTION, console, emit, fail, folding_table, user_errors
from synth_pipelines.config import Settings
from synth_pipelines.contracts.operator_key import ROLES

admin_app = typer.Typer(
    help="Administer the deployment: operators' API keys, organizations' limits.",
    no_args_is_help=True,
)
key_app = typer.Typer(help="Create, list and revoke operators' API keys.", no_args_is_help=True)
admin_app.add_typer(key_app, name="key")
org_app = typer.Typer(help="Organizations' admission limits.", no_args_is_help=True)
admin_app.add_typer(org_app, name="org")

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_DURATION = re.compile(r"^(\d+)([smhd])$")


def seconds(text: str) -> int:
    """`30d`, `12h`, `45m` or `90s` in seconds; anything else a one-line refusal."""
    found = _DURATION.match(text.strip())
    if found is None or int(found.group(1)) == 0:
        fail(f"--expires {text!r} must be a positive number with a unit: 90s, 45m, 12h or 30d")
    return int(found.group(1)) * _UNITS[found.group(2)]


@key_app.command("create")
def create(
    ctx: typer.Context,
    owner: str = typer.Option(..., "--owner", help="Who everything the key creates belongs to."),
    org: str = typer.Option(..., "--org", help="The organization whose limits it shares."),
    role: str = typer.Option("operator", "--role", help=f"One of {', '.join(ROLES)}."),
    expires: str | None = typer.Option(
        None, "--expires", help="Lifetime: 90s, 45m, 12h or 30d; default: until revoked."
    ),
    as_json: bool = JSON_OPTION,
) -> None:
    """Create a key and print it once: it is stored only as a hash."""
    if role not in ROLES:
        fail(f"--role {role!r} is not one of {', '.join(ROLES)}")
    body: dict[str, object] = {"owner": owner, "org": org, "role": role}
    if expires is not None:
        body["expires_in_sec"] = seconds(expires)
    config: Settings = ctx.obj
    with user_errors():
        created = GatewayClient(config).request("POST", "/v1/keys", json=body)

    def render() -> None:
        key = created["key"]
        console.print(
            f"API key {key['key_id']} for {key['owner']} ({key['org']}, {key['role']}), "
            f"expires {key['expires_at'] or 'never'}; it is shown only now:",
            highlight=False,
            soft_wrap=True,
        )
        console.print(created["secret"], highlight=False, soft_wrap=True)

    emit("admin key create", created, as_json, render)


@key_app.command("list")
def list_(
    ctx: typer.Context,
    owner: str | None = typer.Option(None, "--owner", help="Only this owner's keys."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Every key, newest first, with its owner, organization, role and state."""
    config: Settings = ctx.obj
    with user_errors():
        found = GatewayClient(config).request(
            "GET", "/v1/keys", params={} if owner is None else {"owner": owner}
        )

    def render() -> None:
        table = folding_table("key", "owner", "org", "role", "created", "expires", "revoked")
        for key in found:
            table.add_row(
                key["key_id"],
                key["owner"],
                key["org"],
                key["role"],
                key["created_at"][:16].replace("T", " "),
                (key["expires_at"] or "never")[:16].replace("T", " "),
                (key["revoked_at"] or "")[:16].replace("T", " "),
            )
        console.print(table)

    emit("admin key list", found, as_json, render)


@key_app.command("revoke")
def revoke(
    ctx: typer.Context,
    key_id: str = typer.Argument(..., help="The key's id (`synth admin key list`)."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Refuse the key from the gateway's next request on."""
    config: Settings = ctx.obj
    with user_errors():
        revoked = GatewayClient(config).request("DELETE", f"/v1/keys/{key_id}")

    def render() -> None:
        console.print(f"revoked API key {revoked['key_id']} of {revoked['owner']}", highlight=False)

    emit("admin key revoke", revoked, as_json, render)


def limit_value(option: str, text: str) -> int | None:
    """A limit as given: a count of zero or more, or `none` for unlimited."""
    if text.strip().lower() == "none":
        return None
    if not text.strip().isdigit():
        fail(f"{option} {text!r} must be a whole number of 0 or more, or none for unlimited")
    return int(text)


@org_app.command("limits")
def limits(
    ctx: typer.Context,
    org: str = typer.Argument(..., help="The organization (a key's --org)."),
    max_runs: str | None = typer.Option(
        None, "--max-runs", help="Its runs running at once: N, or none for unlimited."
    ),
    max_attempts: str | None = typer.Option(
        None,
        "--max-attempts",
        help="Its attempts active at once, over every worker pool: N, or none for unlimited.",
    ),
    as_json: bool = JSON_OPTION,
) -> None:
    """Show the organization's limits, or set those given (the other one is kept). What
    is over a limit waits in line and starts when the organization is under it again."""
    config: Settings = ctx.obj
    path = f"/v1/orgs/{org}/limits"
    with user_errors():
        client = GatewayClient(config)
        found = client.request("GET", path)
        if max_runs is not None or max_attempts is not None:
            body = {
                "max_concurrent_runs": found["max_concurrent_runs"]
                if max_runs is None
                else limit_value("--max-runs", max_runs),
                "max_active_attempts": found["max_active_attempts"]
                if max_attempts is None
                else limit_value("--max-attempts", max_attempts),
            }
            found = client.request("PUT", path, json=body)

    def render() -> None:
        def shown(limit: int | None) -> str:
            return "unlimited" if limit is None else str(limit)

        console.print(
            f"organization {found['org']}: runs at once {shown(found['max_concurrent_runs'])}, "
            f"attempts at once {shown(found['max_active_attempts'])}",
            highlight=False,
            soft_wrap=True,
        )

    emit("admin org limits", found, as_json, render)
