"""`synth model`: the local Tinker-compatible model service."""

from __future__ import annotations

from typing import Annotated

import typer

from synth_pipelines.cli.output import JSON_OPTION, console, emit, fail, user_errors
from synth_pipelines.config import Settings
from synth_pipelines.rendering.model_names import DEFAULT_MAX_LOADED, QWEN3_TINY, SEEDED_MODEL_NAMES

model_app = typer.Typer(name="model", no_args_is_help=True)


@model_app.callback()
def model() -> None:
    """The local Tinker-compatible model service (sampling and LoRA training)."""


@model_app.command()
def serve(
    ctx: typer.Context,
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
            help="Answer samples from a script PUT to /scripted/v1/script (tests, and a "
            "teacher: `synth model teach`).",
        ),
    ] = False,
) -> None:
    """Serve the Tinker wire protocol for the base models until interrupted."""
    import uvicorn

    from synth_pipelines.tinker_local.allocator import keep_freed_memory
    from synth_pipelines.tinker_local.app import create_app
    from synth_pipelines.tinker_local.errors import UserError

    keep_freed_memory()
    names = base_model or [QWEN3_TINY]
    config: Settings = ctx.obj
    try:
        app = create_app(
            names,
            scripted=scripted,
            object_store_url=config.objects_url,
            s3_endpoint_url=config.s3_endpoint_url,
            max_loaded=max_loaded,
            api_key=config.tinker_api_key,
        )
    except UserError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(2) from None
    served = app.state.model_service.models.served()
    typer.echo(
        f"serving {', '.join(served)} on http://{host}:{port} ({names[0]} loaded at start, "
        f"the others on first use; at most {max_loaded} at once)"
        f"{' in scripted mode' if scripted else ''}\n"
        f"  export TINKER_BASE_URL=http://{host}:{port} TINKER_API_KEY=<its TINKER_API_KEY> "
        "TINKER_TELEMETRY=0"
    )
    # No access log: the SDK makes two requests per sample, and a line for each drowns the
    # service's own messages (and cost it a few percent of its CPU).
    uvicorn.run(app, host=host, port=port, log_level="info", access_log=False)


@model_app.command()
def teach(
    ctx: typer.Context,
    dataset: Annotated[str, typer.Option(help="The dataset whose demonstrations to answer with.")],
    actor: Annotated[
        str,
        typer.Option(
            help="The actor profile (`@file.json` or org/name@version) whose harness the "
            "teacher answers: its engine picks the demonstration files."
        ),
    ],
    url: Annotated[
        str | None,
        typer.Option(help="The scripted model service (default: the teacher service URL)."),
    ] = None,
    as_json: bool = JSON_OPTION,
) -> None:
    """Script a scripted model service to answer a harness with a dataset's demonstrations.

    Each task's demonstration for the actor's engine becomes one entry per assistant turn:
    a prompt holding the task's instruction and as many tool results as turns before it
    is answered with that turn's completion tokens. Bind a run of the actor to the teacher
    model (`--model synth/qwen3-learner-teacher`) to capture what the harness sends with
    those answers; a warm start with `captured_run` then learns from the captures."""
    import httpx

    from synth_pipelines.control.database import control_engine
    from synth_pipelines.learning.demonstrations import DemonstrationError
    from synth_pipelines.learning.teacher import dataset_demonstrations, dataset_script
    from synth_pipelines.registry.datasets import DatasetError, get_dataset
    from synth_pipelines.rendering.model_registry import TEACHER_MODEL, configured_registry
    from synth_pipelines.storage.objectstore import configured_object_store
    from synth_pipelines.submission.run_requests import read_profile
    from synth_pipelines.tls import client_context

    config: Settings = ctx.obj
    target = url or config.teacher_service_url
    engine = control_engine(config)
    store = configured_object_store(config)
    with user_errors(DatasetError, DemonstrationError):
        version = get_dataset(engine, dataset)
        harness = read_profile(engine, actor, "actor profile").profile().engine
        adapter = configured_registry(config).get(TEACHER_MODEL).adapter()
        demonstrations = dataset_demonstrations(
            engine, store, version, harness, config.state_dir / "task-cache"
        )
        entries, tasks = dataset_script(adapter, demonstrations)
    try:
        answer = httpx.put(
            f"{target}/scripted/v1/script",
            json={"entries": entries},
            headers={"X-API-Key": config.tinker_api_key},
            timeout=60,
            verify=client_context(),
        )
    except httpx.HTTPError as error:
        fail(
            f"no scripted model service at {target} ({error}); start one with "
            f"`synth model serve --scripted --port {target.rsplit(':', 1)[-1]}`"
        )
    if answer.status_code != 200:
        fail(f"{target} refused the script ({answer.status_code}): {answer.text[:200]}")
    data = {
        "url": target,
        "dataset": version.ref,
        "engine": harness,
        "model": TEACHER_MODEL,
        "tasks": tasks,
        "entries": len(entries),
    }
    emit(
        "model teach",
        data,
        as_json,
        lambda: console.print(
            f"{target} answers {harness} with {version.ref}'s demonstrations: "
            f"{len(entries)} turns of {tasks} tasks; bind runs to --model {TEACHER_MODEL}"
        ),
    )


@model_app.command("list")
def list_models(ctx: typer.Context, as_json: bool = JSON_OPTION) -> None:
    """The models the capture proxy serves (the built-in ones and `SYNTH_MODEL_REGISTRY`'s):
    family, context and output limits, route, and whether the platform can train them."""
    from synth_pipelines.cli.gateway_client import GatewayClient

    with user_errors():
        data = GatewayClient(ctx.obj).request("GET", "/v1/models")

    def table() -> None:
        from rich.table import Table

        rows = Table("family", "context", "output")
        for name in ("route", "trainable", "model"):
            rows.add_column(name, no_wrap=True)
        for model in data:
            rows.add_row(
                model["family"],
                str(model["max_input_tokens"]),
                str(model["max_tokens"]),
                model["route"],
                "yes" if model["trainable"] else "no",
                model["id"],
            )
        console.print(rows)

    emit("model list", data, as_json, table)
