"""`synth agent run` and `synth claude`: profiles and Claude Code outside managed runs."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import typer

from synth_pipelines.cli.output import (
    EXIT_RUN_FAILED,
    JSON_OPTION,
    console,
    emit,
    fail,
    user_errors,
)
from synth_pipelines.config import Settings

if TYPE_CHECKING:
    from synth_pipelines.cli.gateway_client import GatewayClient
    from synth_pipelines.contracts.profile import PinnedProfile
    from synth_pipelines.runtime.local_run import OpenSession

agent_app = typer.Typer(
    help="Run an agent profile on a task in the local sandbox.", no_args_is_help=True
)


@agent_app.command("run")
def run(
    ctx: typer.Context,
    profile: str = typer.Option(
        ..., "--profile", help="@file.json or a published org/name@version."
    ),
    task: Path = typer.Option(..., "--task", help="A Harbor task directory."),
    model: str | None = typer.Option(
        None, "--model", help="Model binding (default: the profile's)."
    ),
    output: Path | None = typer.Option(None, "--output", help="Where logs and the workspace go."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Launch the profile on the task through the capture proxy, like a managed trial, with
    a session token the gateway mints for your key's owner (revoked when the run ends)."""
    import asyncio

    from synth_pipelines.agents.constraints import LaunchConstraintError
    from synth_pipelines.agents.engines import EngineUnavailableError
    from synth_pipelines.agents.session import ModelUnavailableError
    from synth_pipelines.cli.gateway_client import GatewayClient
    from synth_pipelines.registry.task_packages import TaskFormatError
    from synth_pipelines.runtime.local_run import run_locally

    config: Settings = ctx.obj
    client = GatewayClient(config)
    with user_errors(
        LaunchConstraintError,
        EngineUnavailableError,
        ModelUnavailableError,
        TaskFormatError,
        ValueError,
    ):
        pinned = gateway_profile(client, profile)
        bound = model or pinned.profile().model
        if bound is None:
            fail(f"profile {pinned.name}@{pinned.version} binds no model; pass --model")
        destination = output or config.state_dir / "agent-runs" / task.name
        done = asyncio.run(
            run_locally(pinned, task, bound, destination, config, gateway_sessions(client))
        )
    result = done.outcome.result
    data: dict[str, Any] = {
        "run_id": done.identity.run_id,
        "attempt_id": done.identity.attempt_id,
        "profile": f"{pinned.name}@{pinned.version}",
        "profile_digest": pinned.digest,
        "model": bound,
        "exit_code": result.exit_code,
        "missing_outputs": list(result.missing_outputs),
        "duration_sec": round(result.duration_sec, 2),
        "launch_digest": done.outcome.template.digest(),
        "logs": str(done.output_dir / "agent"),
        "workspace": str(done.workspace),
    }
    emit(
        "agent run",
        data,
        as_json,
        lambda: console.print(
            f"{data['profile']} on {task}: exit code {data['exit_code']} in "
            f"{data['duration_sec']} s; logs in {data['logs']}, workspace in {data['workspace']}"
            + (
                f"; missing outputs: {', '.join(data['missing_outputs'])}"
                if data["missing_outputs"]
                else ""
            )
        ),
    )
    if result.exit_code != 0 or result.missing_outputs:
        raise typer.Exit(EXIT_RUN_FAILED)


def gateway_profile(client: GatewayClient, value: str) -> PinnedProfile:
    """`@file.json` or inline JSON as given, or a published `org/name@version` as the
    gateway holds it."""
    from synth_pipelines.contracts.published_profile import PublishedProfile
    from synth_pipelines.submission.run_requests import pinned_document, read_json_argument

    if value.startswith("@") or value.lstrip().startswith("{"):
        return pinned_document(read_json_argument(value, "profile"), "profile", value)
    found = client.request("GET", f"/v1/profiles/{quote(value, safe='/@')}")
    return PublishedProfile.model_validate(found).pinned


def gateway_sessions(client: GatewayClient) -> OpenSession:
    """Sessions the gateway grants the client's key (`POST /v1/sessions`), each revoked
    through it (`DELETE /v1/sessions/{id}`)."""
    from synth_pipelines.agents.session import AttemptToken
    from synth_pipelines.contracts.interactive_session import InteractiveSession
    from synth_pipelines.runtime.local_run import AttemptSession

    def open_session(model: str, ttl_sec: int) -> AttemptSession:
        granted = InteractiveSession.model_validate(
            client.request("POST", "/v1/sessions", json={"model": model, "ttl_sec": ttl_sec})
        )

        def revoke(_reason: str) -> None:
            # The gateway records its own reason: the session's key revoked it.
            client.text("DELETE", f"/v1/sessions/{granted.token_id}")

        return AttemptSession(
            scope=granted.scope,
            token=AttemptToken(granted.token, revoke),
            proxy_url=granted.proxy_url,
        )

    return open_session


def _output_limit(model_limit: int) -> int:
    """The model's output limit, or the operator's own Claude Code setting
    (`CLAUDE_CODE_MAX_OUTPUT_TOKENS`) where it asks for less."""
    asked = os.environ.get("CLAUDE_CODE_MAX_OUTPUT_TOKENS", "")
    return min(model_limit, int(asked)) if asked.isdigit() and int(asked) > 0 else model_limit


def claude(
    ctx: typer.Context,
    model: str = typer.Option(..., "--model", help="A base model or a checkpoint reference."),
) -> None:
    """Launch the installed Claude Code here, through the capture proxy (args after --),
    with a session token the gateway mints for your key's owner and this model."""
    from synth_pipelines.agents.engines import MODEL_ALIASES
    from synth_pipelines.cli.gateway_client import GatewayClient

    config: Settings = ctx.obj
    binary = config.claude_code
    if not binary.exists():
        fail(f"Claude Code is not installed at {binary}; run `make setup`")
    with user_errors():
        session = GatewayClient(config).request("POST", "/v1/sessions", json={"model": model})
    env = {
        **os.environ,
        "ANTHROPIC_BASE_URL": session["proxy_url"],
        "ANTHROPIC_AUTH_TOKEN": session["token"],
        **dict.fromkeys(MODEL_ALIASES, model),
        "CLAUDE_CODE_MAX_CONTEXT_TOKENS": str(session["context_window"]),
        "CLAUDE_CODE_MAX_OUTPUT_TOKENS": str(_output_limit(session["max_output"])),
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }
    env.pop("ANTHROPIC_API_KEY", None)
    if config.gateway_ca is not None:
        # Its model calls go to the gateway: Node checks its certificate by this authority.
        env["NODE_EXTRA_CA_CERTS"] = str(config.gateway_ca)
    os.execve(str(binary), [str(binary), "--model", model, *ctx.args], env)
