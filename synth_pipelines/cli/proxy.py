"""`synth proxy serve|token`: the capture proxy and its scoped credentials."""

from __future__ import annotations

import typer

from synth_pipelines.cli.output import JSON_OPTION, console, emit, user_errors
from synth_pipelines.config import Settings

proxy_app = typer.Typer(help="The capture proxy and its scoped tokens.", no_args_is_help=True)


@proxy_app.command("serve")
def serve(
    ctx: typer.Context,
    workers: int | None = typer.Option(
        None,
        "--workers",
        min=0,
        help="Worker processes (0: in process); default: one more than the CPU cores, at most 8.",
    ),
) -> None:
    """Serve Anthropic Messages on SYNTH_PROXY_URL until interrupted."""
    from proxy.libtorch import defer_torch_package

    defer_torch_package()
    from proxy.sandbox_listener import SandboxSocketTakenError
    from proxy.server import DEFAULT_WORKERS
    from proxy.server import serve as run
    from resources.captured_interactions_events import DagsterReporter

    # The proxy's published evidence is reported to Dagster for lineage; the proxy itself
    # does not know Dagster.
    config: Settings = ctx.obj
    reporter = DagsterReporter(config.dagster_home)
    try:
        with user_errors(SandboxSocketTakenError):
            run(
                config,
                workers=DEFAULT_WORKERS if workers is None else workers,
                report_published=reporter,
            )
    finally:
        reporter.close()


@proxy_app.command("token")
def token(
    ctx: typer.Context,
    run: str = typer.Option(..., "--run", help="Run the token is bound to."),
    attempt: str = typer.Option(..., "--attempt", help="Attempt the token is bound to."),
    model: str = typer.Option(..., "--model", help="The only model the token may sample."),
    ttl: int = typer.Option(3600, "--ttl", min=1, help="Seconds until it expires."),
    role: str = typer.Option("actor", "--role", help="actor, judge, interactive or operator."),
    batch: str | None = typer.Option(None, "--batch", help="Batch partition, if any."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Mint a scoped model-access token with the platform's signing key (for operators and
    tests); the key is never created here."""
    from synth_pipelines.contracts.scoped_token import AttemptScope
    from synth_pipelines.credentials import SigningKeyError, mint_token, read_signing_key

    config: Settings = ctx.obj
    with user_errors(SigningKeyError):
        value = mint_token(
            read_signing_key(config.signing_key_path),
            AttemptScope(
                run_id=run,
                attempt_id=attempt,
                owner=config.owner,
                model=model,
                role=role,
                batch=batch,
            ),
            ttl_sec=ttl,
        )
    emit(
        "proxy token",
        {"token": value, "expires_in": ttl},
        as_json,
        lambda: console.print(value, soft_wrap=True),
    )
