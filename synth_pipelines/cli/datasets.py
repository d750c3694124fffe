"""`synth dataset publish|show|list`."""

from __future__ import annotations

from pathlib import Path

import typer

from synth_pipelines.cli.output import (
    JSON_OPTION,
    console,
    emit,
    errors,
    folding_table,
    user_errors,
)
from synth_pipelines.cli.progress import ProgressDisplay, PublishProgress
from synth_pipelines.config import Settings
from synth_pipelines.control.database import control_engine
from synth_pipelines.control.table_outputs import current_table_ref
from synth_pipelines.registry.datasets import (
    DatasetError,
    PublishPhase,
    get_dataset,
    list_datasets,
    publish_dataset,
    read_page,
)
from synth_pipelines.storage.objectstore import configured_object_store

dataset_app = typer.Typer(
    help="Publish and inspect immutable dataset versions.", no_args_is_help=True
)


@dataset_app.command("publish")
def publish(
    ctx: typer.Context,
    directory: Path = typer.Argument(..., help="A task directory, or a directory of tasks."),
    name: str = typer.Option(..., "--name", help="Dataset name, 'org/name'."),
    version: str = typer.Option(..., "--version", help="Version label, e.g. v1."),
    description: str = typer.Option("", "--description"),
    as_json: bool = JSON_OPTION,
) -> None:
    """Record an immutable dataset version: ordered tasks pinned by Harbor digest. Tasks
    packed, then uploaded, show as a bar on stderr; with --json as one `dataset publish
    progress` JSON object per line on stderr per task (`synth schema 'dataset publish
    progress'`), stdout keeping only the document."""
    from resources.dagster_instance import report_dataset_published

    config: Settings = ctx.obj
    engine, store = control_engine(config), configured_object_store(config)
    with (
        user_errors(DatasetError),
        ProgressDisplay("json" if as_json else "bar", errors) as display,
    ):

        def task_done(phase: PublishPhase, task: str, done: int, total: int) -> None:
            display.show(PublishProgress(f"{name}@{version}", phase, task, done, total))

        dataset, created = publish_dataset(
            engine, store, directory, name, version, config.owner, description, task_done
        )
    if created:
        table = current_table_ref(engine, "dataset_tasks", dataset.ref)
        assert table is not None
        report_dataset_published(config.dagster_home, dataset, table, store.uri(table.key))
    emit(
        "dataset publish",
        {**dataset.model_dump(), "created": created},
        as_json,
        lambda: console.print(
            f"{'published' if created else 'already published (identical content)'} "
            f"{dataset.ref}: {dataset.task_count} tasks, {dataset.digest}"
        ),
    )


@dataset_app.command("show")
def show(
    ctx: typer.Context,
    ref: str = typer.Argument(..., help="org/name@version"),
    as_json: bool = JSON_OPTION,
) -> None:
    """The tasks of a dataset version, in order, with their digests."""
    engine = control_engine(ctx.obj)
    with user_errors(DatasetError):
        dataset = get_dataset(engine, ref)
    tasks = read_page(engine, dataset, 0, dataset.task_count)

    def render() -> None:
        console.print(f"[bold]{dataset.ref}[/] {dataset.digest} ({dataset.task_count} tasks)")
        table = folding_table("#", "task", "digest")
        for task in tasks:
            table.add_row(str(task.position), task.name, task.digest)
        console.print(table)

    emit(
        "dataset show",
        {**dataset.model_dump(), "tasks": tasks},
        as_json,
        render,
    )


@dataset_app.command("list")
def list_(ctx: typer.Context, as_json: bool = JSON_OPTION) -> None:
    """Every published dataset version."""
    versions = list_datasets(control_engine(ctx.obj))

    def render() -> None:
        table = folding_table("dataset", "tasks", "digest", "published")
        for dataset in versions:
            table.add_row(
                dataset.ref,
                str(dataset.task_count),
                dataset.digest,
                dataset.created_at.strftime("%Y-%m-%d %H:%M"),
            )
        console.print(table)

    emit("dataset list", versions, as_json, render)
