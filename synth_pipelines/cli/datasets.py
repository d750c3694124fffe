"""`synth dataset publish|show|list`, through the gateway.

Publishing packs the tasks here, then moves each package straight to the object store
through an upload grant the gateway issues, and has the gateway commit the version.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

import typer
from pydantic import TypeAdapter

from synth_pipelines.cli.gateway_client import GatewayClient
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
from synth_pipelines.contracts.dataset import DatasetVersion
from synth_pipelines.contracts.documents import DatasetWithTasks, PublishedDataset
from synth_pipelines.contracts.upload_grant import (
    DatasetCommit,
    GrantRequest,
    PackageToUpload,
    UploadGrants,
)
from synth_pipelines.registry.datasets import DatasetError, PublishPhase, pack_dataset
from synth_pipelines.registry.task_packages import package_sha256

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
    config: Settings = ctx.obj
    with (
        user_errors(DatasetError),
        ProgressDisplay("json" if as_json else "bar", errors) as display,
    ):

        def task_done(phase: PublishPhase, task: str, done: int, total: int) -> None:
            display.show(PublishProgress(f"{name}@{version}", phase, task, done, total))

        packages = pack_dataset(directory, name, version, task_done)
        gateway = GatewayClient(config)
        request = GrantRequest(
            name=name,
            version=version,
            tasks=[
                PackageToUpload(
                    name=package.name,
                    digest=package.digest,
                    sha256=package_sha256(package),
                    size=len(package.archive),
                )
                for package in packages
            ],
        )
        granted = UploadGrants.model_validate(
            gateway.request("POST", "/v1/datasets/grants", json=request.model_dump())
        )
        if not granted.published:
            for done, (package, grant) in enumerate(zip(packages, granted.grants, strict=True), 1):
                if grant.url is not None:
                    gateway.upload(grant.url, package.archive, grant.headers)
                task_done("uploaded", package.name, done, len(packages))
        commit = DatasetCommit(
            name=name,
            version=version,
            description=description,
            grants=[grant.grant for grant in granted.grants],
        )
        dataset = PublishedDataset.model_validate(
            gateway.request("POST", "/v1/datasets", json=commit.model_dump())
        )
    emit(
        "dataset publish",
        dataset,
        as_json,
        lambda: console.print(
            f"{'published' if dataset.created else 'already published (identical content)'} "
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
    with user_errors():
        dataset = DatasetWithTasks.model_validate(
            GatewayClient(ctx.obj).request("GET", f"/v1/datasets/{quote(ref, safe='/@')}")
        )

    def render() -> None:
        console.print(f"[bold]{dataset.ref}[/] {dataset.digest} ({dataset.task_count} tasks)")
        table = folding_table("#", "task", "digest")
        for task in dataset.tasks:
            table.add_row(str(task.position), task.name, task.digest)
        console.print(table)

    emit("dataset show", dataset, as_json, render)


@dataset_app.command("list")
def list_(ctx: typer.Context, as_json: bool = JSON_OPTION) -> None:
    """Every published dataset version."""
    with user_errors():
        versions = TypeAdapter(list[DatasetVersion]).validate_python(
            GatewayClient(ctx.obj).request("GET", "/v1/datasets")
        )

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
