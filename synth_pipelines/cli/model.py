"""`synth model`: the local Tinker-compatible model service."""

from __future__ import annotations

from typing import Annotated

import typer
import uvicorn

from synth_pipelines.tinker_local.errors import UserError
from synth_pipelines.tinker_local.names import DEFAULT_MAX_LOADED, QWEN3_TINY, SEEDED_MODEL_NAMES

model_app = typer.Typer(name="model", no_args_is_help=True)


@model_app.callback()
def model() -> None:
    """The local Tinker-compatible model service (sampling and LoRA training)."""


@model_app.command()
def serve(
    base_model: Annotated[
        list[str] | None,
        typer.Option(
            help="A model to load at start (repeatable): a seeded model's name or the path of "
            "a local Hugging Face model directory. Every seeded model "
            f"({', '.join(SEEDED_MODEL_NAMES)}) is served too, loaded on first use.",
        ),
    ] = None,
    max_loaded: Annotated[
        int, typer.Option(min=1, help="Most base models held in memory at once.")
    ] = DEFAULT_MAX_LOADED,
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
    """Serve the Tinker wire protocol for the base models until interrupted."""
    from synth_pipelines.tinker_local.allocator import keep_freed_memory
    from synth_pipelines.tinker_local.app import create_app

    keep_freed_memory()
    names = base_model or [QWEN3_TINY]
    try:
        app = create_app(names, scripted=scripted, max_loaded=max_loaded)
    except UserError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(2) from None
    served = app.state.model_service.models.served()
    typer.echo(
        f"serving {', '.join(served)} on http://{host}:{port} ({names[0]} loaded at start, "
        f"the others on first use; at most {max_loaded} at once)"
        f"{' in scripted mode' if scripted else ''}\n"
        f"  export TINKER_BASE_URL=http://{host}:{port} TINKER_API_KEY=tml-local TINKER_TELEMETRY=0"
    )
    # No access log: the SDK makes two requests per sample, and a line for each drowns the
    # service's own messages (and cost it a few percent of its CPU).
    uvicorn.run(app, host=host, port=port, log_level="info", access_log=False)
