"""`synth model`: the local Tinker-compatible model service."""

from __future__ import annotations

from typing import Annotated

import typer
import uvicorn

from synth_pipelines.tinker_local.errors import UserError
from synth_pipelines.tinker_local.names import QWEN3_TINY

model_app = typer.Typer(name="model", no_args_is_help=True)


@model_app.callback()
def model() -> None:
    """The local Tinker-compatible model service (sampling and LoRA training)."""


@model_app.command()
def serve(
    base_model: Annotated[
        str,
        typer.Option(help=f"{QWEN3_TINY!r} or the path of a local Hugging Face model directory."),
    ] = QWEN3_TINY,
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8100,
    scripted: Annotated[
        bool,
        typer.Option(
            "--scripted",
            help="Answer samples from a script PUT to /scripted/v1/script (tests only).",
        ),
    ] = False,
) -> None:
    """Serve the Tinker wire protocol for one base model until interrupted."""
    from synth_pipelines.tinker_local.app import create_app

    try:
        app = create_app(base_model, scripted=scripted)
    except UserError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(2) from None
    typer.echo(
        f"serving {base_model} on http://{host}:{port}"
        f"{' in scripted mode' if scripted else ''}\n"
        f"  export TINKER_BASE_URL=http://{host}:{port} TINKER_API_KEY=tml-local TINKER_TELEMETRY=0"
    )
    # No access log: the SDK makes two requests per sample, and a line for each drowns the
    # service's own messages (and cost it a few percent of its CPU).
    uvicorn.run(app, host=host, port=port, log_level="info", access_log=False)
