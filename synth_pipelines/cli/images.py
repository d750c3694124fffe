"""`synth image list|build|prune`: the local image builder's cache of bases and layers;
`synth image project`: the project's own image for a Docker deployment."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import typer
from harbor.models.task.task import Task
from rich.table import Table

from synth_pipelines.cli.output import JSON_OPTION, UserError, console, emit, errors, user_errors
from synth_pipelines.config import Settings
from synth_pipelines.sandbox.bases import BASE_ENV, KNOWN_BASES, BaseImages
from synth_pipelines.sandbox.build_bounds import BuildLimits
from synth_pipelines.sandbox.dockerfile import read_dockerfile
from synth_pipelines.sandbox.errors import (
    ImageBuildError,
    MemoryLimitExceededError,
    SandboxStartError,
    TaskDefinitionError,
    UnsupportedTaskError,
)
from synth_pipelines.sandbox.image_build import ImageBuilder, Progress
from synth_pipelines.sandbox.layers import KEY_LENGTH, Layer, LayerStore
from synth_pipelines.sandbox.limits import ResourceLimits
from synth_pipelines.sandbox.options import DEFAULT_PIDS_MAX

image_app = typer.Typer(
    help="Inspect, build and prune the images tasks' Dockerfiles are built into.",
    no_args_is_help=True,
)


def _when(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).isoformat(timespec="seconds")


def _size(size_bytes: int) -> str:
    return f"{size_bytes / 2**20:,.0f}M"


def _layer_document(store: LayerStore, layer: Layer) -> dict[str, Any]:
    return {
        "key": layer.key[:KEY_LENGTH],
        "parent": layer.parent[:KEY_LENGTH] if layer.parent else None,
        "description": layer.description,
        "size_bytes": layer.size_bytes,
        "built_at": _when(layer.built_at),
        "last_used": _when(layer.last_used),
        "in_use": store.in_use(layer),
    }


def _store(config: Settings) -> LayerStore:
    return LayerStore(config.images_dir / "layers")


@image_app.command("list")
def list_images(ctx: typer.Context, as_json: bool = JSON_OPTION) -> None:
    """The cached bases and layers, with their sizes, least recently used first."""
    config: Settings = ctx.obj
    store = _store(config)
    images = BaseImages(config.images_dir, store, config.debian_mirror)
    names: dict[Path, list[str]] = {}
    for name, base in sorted(KNOWN_BASES.items()):
        names.setdefault(images.tarball_path(base), []).append(name)
    bases: list[dict[str, Any]] = [
        {"key": path.stem, "names": found, "size_bytes": path.stat().st_size, "path": str(path)}
        for path, found in names.items()
        if path.exists()
    ]
    layers = [
        _layer_document(store, layer)
        for layer in sorted(store.layers(), key=lambda layer: layer.last_used)
    ]
    data = {
        "root": str(config.images_dir),
        "bound_bytes": config.image_cache_mb << 20,
        "layer_bytes": sum(layer["size_bytes"] for layer in layers),
        "base_bytes": sum(base["size_bytes"] for base in bases),
        "bases": bases,
        "layers": layers,
    }

    def render() -> None:
        console.print(f"[bold]image cache[/] {data['root']}")
        table = Table("base", "names", "size")
        for column in table.columns:
            column.overflow = "fold"
        for base in bases:
            table.add_row(base["key"], ", ".join(base["names"]), _size(base["size_bytes"]))
        console.print(table)
        table = Table("layer", "parent", "size", "last used", "in use", "step")
        for column in table.columns:
            column.overflow = "fold"
        for layer in layers:
            table.add_row(
                layer["key"],
                layer["parent"] or "-",
                _size(layer["size_bytes"]),
                layer["last_used"][:16].replace("T", " "),
                "yes" if layer["in_use"] else "",
                layer["description"],
            )
        console.print(table)
        console.print(
            f"{len(layers)} layers, {_size(data['layer_bytes'])} of a "
            f"{_size(data['bound_bytes'])} bound (SYNTH_IMAGE_CACHE_MB); "
            f"{len(bases)} base tarballs, {_size(data['base_bytes'])}"
        )

    emit("image list", data, as_json, render)


def _task_dirs(path: Path) -> list[Path]:
    if (path / "task.toml").is_file():
        return [path]
    found = sorted(child for child in path.iterdir() if (child / "task.toml").is_file())
    if not found:
        raise UserError(f"{path} is neither a task directory nor a directory of tasks")
    return found


def _task_limits(task_dir: Path) -> BuildLimits:
    """The limits the task's attempts have (task.toml's `[environment]`, the sandbox's
    default pids bound), which its build steps run within too."""
    declared = Task(task_dir).config.environment
    resources = ResourceLimits(
        memory_mb=declared.memory_mb, cpus=declared.cpus, pids=DEFAULT_PIDS_MAX
    )
    return BuildLimits(resources, declared.storage_mb)


async def _build(task_dir: Path, builder: ImageBuilder) -> dict[str, Any]:
    dockerfile = task_dir / "environment" / "Dockerfile"
    if not dockerfile.is_file():
        raise UserError(f"task {task_dir.name} has no environment/Dockerfile to build")
    recipe = read_dockerfile(dockerfile, task=task_dir.name, base_env=BASE_ENV)
    if not recipe.needs_build:
        raise UserError(
            f"task {task_dir.name} has no RUN or USER step: the sandbox runs it on the "
            "host's system, without an image"
        )
    started = time.monotonic()
    image = await builder.build(
        recipe, dockerfile.parent, task=task_dir.name, limits=_task_limits(task_dir)
    )
    return {
        "task": task_dir.name,
        "base": image.base,
        "image": image.key[:KEY_LENGTH],
        "layers": len(image.layers),
        "built": builder.built,
        "cached": builder.cached,
        "size_bytes": image.size_bytes,
        "seconds": round(time.monotonic() - started, 3),
    }


@image_app.command("build")
def build(
    ctx: typer.Context,
    path: Path = typer.Argument(..., help="A task directory, or a directory of tasks."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Build the images of tasks' Dockerfiles into the cache (progress on stderr), as
    their first attempt would; what is cached already is reused."""

    def progress(task: str) -> Progress:
        return lambda line: errors.print(f"[dim]{task}: {line}[/]", highlight=False, soft_wrap=True)

    with user_errors(
        UnsupportedTaskError,
        TaskDefinitionError,
        MemoryLimitExceededError,
        ImageBuildError,
        SandboxStartError,
        OSError,
    ):
        if not path.is_dir():
            raise UserError(f"{path} is not a directory")
        built = []
        for task_dir in _task_dirs(path):
            builder = ImageBuilder.configured(ctx.obj, progress(task_dir.name))
            built.append(asyncio.run(_build(task_dir, builder)))

    def render() -> None:
        table = Table("task", "base", "image", "layers", "built", "cached", "size", "seconds")
        for column in table.columns:
            column.overflow = "fold"
        for row in built:
            table.add_row(
                row["task"],
                row["base"],
                row["image"],
                str(row["layers"]),
                str(row["built"]),
                str(row["cached"]),
                _size(row["size_bytes"]),
                f"{row['seconds']:.1f}",
            )
        console.print(table)

    emit("image build", built, as_json, render)


@image_app.command("project")
def project(ctx: typer.Context, as_json: bool = JSON_OPTION) -> None:
    """Build the project's image, which a Docker deployment's run workers run in, on the
    platform's Docker engine (progress on stderr); an image of the same inputs is reused.
    Set SYNTH_PROJECT_IMAGE to the tag it prints."""
    from synth_pipelines.services.dockerd import DockerDaemon, DockerDaemonError
    from synth_pipelines.services.project_image import ProjectImageError, build_project_image

    def progress(line: str) -> None:
        errors.print(f"[dim]{line}[/]", highlight=False, soft_wrap=True)

    with user_errors(ProjectImageError, DockerDaemonError, SandboxStartError, OSError):
        config: Settings = ctx.obj
        engine = DockerDaemon.of(config.images_dir, config.project_root)
        engine.ensure()
        image = build_project_image(
            engine,
            progress,
            images_dir=config.images_dir,
            debian_mirror=config.debian_mirror,
            project_root=config.project_root,
        )
    document = {
        "image": image.tag,
        "dependencies": image.deps_tag,
        "built": image.built,
        "docker_host": engine.host,
        "seconds": round(image.build_sec, 1),
    }

    def render() -> None:
        state = "built" if image.built else "up to date"
        console.print(f"{image.tag} ({state}, {image.build_sec:.1f} s) on {engine.host}")
        console.print(f"export SYNTH_PROJECT_IMAGE={image.tag} DOCKER_HOST={engine.host}")

    emit("image project", document, as_json, render)


@image_app.command("prune")
def prune(
    ctx: typer.Context,
    keep_mb: int | None = typer.Option(
        None,
        "--keep-mb",
        min=0,
        help="Prune least recently used layers until at most this many MiB remain "
        "(default: the bound, SYNTH_IMAGE_CACHE_MB); 0 removes every layer not in use.",
    ),
    as_json: bool = JSON_OPTION,
) -> None:
    """Remove least recently used layers (with the layers built on them) that no
    running sandbox stands on; base tarballs are kept."""
    config: Settings = ctx.obj
    store = _store(config)
    keep = (config.image_cache_mb if keep_mb is None else keep_mb) << 20
    removed = [_layer_document(store, layer) for layer in store.prune(keep)]
    data = {
        "keep_bytes": keep,
        "removed": removed,
        "freed_bytes": sum(layer["size_bytes"] for layer in removed),
        "layer_bytes": sum(layer.size_bytes for layer in store.layers()),
    }
    emit(
        "image prune",
        data,
        as_json,
        lambda: console.print(
            f"removed {len(removed)} layers ({_size(data['freed_bytes'])}); "
            f"{_size(data['layer_bytes'])} remain"
        ),
    )
