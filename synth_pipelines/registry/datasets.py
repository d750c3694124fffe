"""Immutable dataset versions: publish once, read in pages.

A version is its ordered task list. Publishing identical content again is a no-op;
different content under an existing name@version is refused.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from sqlalchemy import Engine, insert, select
from sqlalchemy.exc import IntegrityError

from synth_pipelines.contracts.dataset import DatasetVersion, TaskRef, dataset_digest
from synth_pipelines.contracts.refs import check_name, check_version, parse_ref
from synth_pipelines.control.schema import dataset_tasks, dataset_versions
from synth_pipelines.control.table_outputs import store_table
from synth_pipelines.registry.task_packages import (
    TaskFormatError,
    TaskPackage,
    package_sha256,
    package_task,
)
from synth_pipelines.storage.objectstore import ObjectIntegrityError, ObjectStore


class DatasetError(ValueError):
    """A dataset request that cannot be honored, with the reason for the operator."""


class DatasetNotFoundError(DatasetError, LookupError):
    pass


PublishPhase = Literal["packed", "uploaded"]
TaskProgress = Callable[[PublishPhase, str, int, int], None]
"""Told of each task as it is packed, then as it is uploaded: (phase, task name, done,
total); a plain callable, so that whoever shows progress stays above this layer."""


def _unfollowed(phase: PublishPhase, task: str, done: int, total: int) -> None:
    """Publishing that nobody follows."""


def discover_task_dirs(directory: Path) -> list[Path]:
    """A task directory itself, or the task directories directly under it, by name."""
    if not directory.is_dir():
        raise DatasetError(f"{directory}: not a directory")
    if (directory / "task.toml").is_file():
        return [directory]
    found = sorted(path for path in directory.iterdir() if (path / "task.toml").is_file())
    if not found:
        raise DatasetError(f"{directory}: holds no task directories (none has a task.toml)")
    root = directory.resolve()
    for task_dir in found:
        if not task_dir.resolve().is_relative_to(root):
            raise DatasetError(
                f"{task_dir}: links to {task_dir.resolve()}, outside {directory}; a dataset "
                "publishes what its directory holds, so copy the task in"
            )
    return found


def find_dataset(engine: Engine, name: str, version: str) -> DatasetVersion | None:
    with engine.connect() as conn:
        row = conn.execute(
            select(dataset_versions).where(
                dataset_versions.c.name == name, dataset_versions.c.version == version
            )
        ).first()
    return DatasetVersion.model_validate(row, from_attributes=True) if row else None


def get_dataset(engine: Engine, ref: str) -> DatasetVersion:
    try:
        name, version = parse_ref(ref, "dataset")
    except ValueError as error:
        raise DatasetError(str(error)) from None
    found = find_dataset(engine, name, version)
    if found is None:
        raise DatasetNotFoundError(
            f"unknown dataset {ref!r}; publish it with `synth dataset publish` "
            "or see `synth dataset list`"
        )
    return found


def list_datasets(engine: Engine) -> list[DatasetVersion]:
    with engine.connect() as conn:
        rows = conn.execute(
            select(dataset_versions).order_by(
                dataset_versions.c.name, dataset_versions.c.created_at
            )
        ).all()
    return [DatasetVersion.model_validate(row, from_attributes=True) for row in rows]


def pack_dataset(
    directory: Path, name: str, version: str, on_task: TaskProgress = _unfollowed
) -> list[TaskPackage]:
    """The task packages `name@version` would hold, in order, packed from a directory."""
    try:
        check_name(name, "dataset")
        check_version(version, "dataset")
        task_dirs = discover_task_dirs(directory)
        packages = []
        for task_dir in task_dirs:
            packages.append(package_task(task_dir))
            on_task("packed", packages[-1].name, len(packages), len(task_dirs))
    except (TaskFormatError, ValueError) as error:
        raise DatasetError(str(error)) from None
    duplicates = _twice([package.name for package in packages])
    if duplicates:
        raise DatasetError(f"{directory}: task names appear twice: {', '.join(duplicates)}")
    return packages


def task_refs(packages: list[TaskPackage]) -> list[TaskRef]:
    """The packages as the tasks of a version, in order."""
    return [
        TaskRef(
            position=position,
            name=package.name,
            digest=package.digest,
            package_key=package.key,
            package_sha256=package_sha256(package),
        )
        for position, package in enumerate(packages)
    ]


def published_as(engine: Engine, name: str, version: str, digest: str) -> DatasetVersion | None:
    """The version already recorded with this content, None when there is none yet;
    other content under `name@version` is refused."""
    existing = find_dataset(engine, name, version)
    return None if existing is None else _same_or_refuse(existing, digest)


def publish_dataset(
    engine: Engine,
    store: ObjectStore,
    directory: Path,
    name: str,
    version: str,
    owner: str,
    description: str = "",
    on_task: TaskProgress = _unfollowed,
) -> tuple[DatasetVersion, bool]:
    """Record `name@version` from a directory of tasks, writing the packages to `store`
    from this process; returns (version, created)."""
    packages = pack_dataset(directory, name, version, on_task)
    tasks = task_refs(packages)
    existing = published_as(engine, name, version, _digest_of(tasks))
    if existing is not None:
        return existing, False
    for done, package in enumerate(packages, 1):
        store.put(package.key, package.archive)
        on_task("uploaded", package.name, done, len(packages))
    return record_dataset(engine, store, name, version, owner, description, tasks)


def record_dataset(
    engine: Engine,
    store: ObjectStore,
    name: str,
    version: str,
    owner: str,
    description: str,
    tasks: list[TaskRef],
) -> tuple[DatasetVersion, bool]:
    """Record `name@version` as `tasks`, whose packages are already in `store`: each is
    checked there (present, with its SHA-256, hashed from the stored bytes) before the
    version refers to it. Returns (version, created); the same content again is a no-op."""
    try:
        check_name(name, "dataset")
        check_version(version, "dataset")
    except ValueError as error:
        raise DatasetError(str(error)) from None
    duplicates = _twice([task.name for task in tasks])
    if duplicates:
        raise DatasetError(f"task names appear twice: {', '.join(duplicates)}")
    digest = _digest_of(tasks)
    existing = published_as(engine, name, version, digest)
    if existing is not None:
        return existing, False
    for task in tasks:
        _check_stored(store, task)
    now = datetime.now(UTC)
    try:
        with engine.begin() as conn:
            conn.execute(
                insert(dataset_versions).values(
                    name=name,
                    version=version,
                    digest=digest,
                    task_count=len(tasks),
                    owner=owner,
                    description=description,
                    created_at=now,
                )
            )
            conn.execute(
                insert(dataset_tasks),
                [
                    {
                        "dataset_name": name,
                        "dataset_version": version,
                        "position": position,
                        "task_name": task.name,
                        "digest": task.digest,
                        "package_key": task.package_key,
                        "package_sha256": task.package_sha256,
                    }
                    for position, task in enumerate(tasks)
                ],
            )
    except IntegrityError:
        winner = find_dataset(engine, name, version)
        if winner is None:
            raise
        return _same_or_refuse(winner, digest), False
    dataset = get_dataset(engine, f"{name}@{version}")
    store_table(
        engine,
        store,
        "dataset_tasks",
        dataset.ref,
        TaskRef.to_table(read_page(engine, dataset, 0, len(tasks))),
    )
    return dataset, True


def _twice(names: list[str]) -> list[str]:
    return sorted({n for n in names if names.count(n) > 1})


def _digest_of(tasks: list[TaskRef]) -> str:
    return dataset_digest([(task.name, task.digest) for task in tasks])


def _check_stored(store: ObjectStore, task: TaskRef) -> None:
    try:
        stored = store.measure(task.package_key)
    except ObjectIntegrityError as error:
        raise DatasetError(f"task {task.name}: {error}, not the granted bytes") from None
    if stored is None:
        raise DatasetError(
            f"task {task.name}: its package {task.package_key} is not in the object store; "
            "upload it with its grant before committing"
        )
    if stored.sha256 != task.package_sha256:
        raise DatasetError(
            f"task {task.name}: the stored package {task.package_key} has sha256 "
            f"{stored.sha256}, not the granted {task.package_sha256}"
        )


def _same_or_refuse(existing: DatasetVersion, digest: str) -> DatasetVersion:
    if existing.digest != digest:
        raise DatasetError(
            f"dataset {existing.ref} already exists with different content "
            f"({existing.digest}, this directory gives {digest}); versions are immutable: "
            "publish under a new version"
        )
    return existing


def read_page(engine: Engine, dataset: DatasetVersion, offset: int, limit: int) -> list[TaskRef]:
    """Tasks at positions [offset, offset + limit) of a version, in order."""
    with engine.connect() as conn:
        rows = conn.execute(
            select(dataset_tasks)
            .where(
                dataset_tasks.c.dataset_name == dataset.name,
                dataset_tasks.c.dataset_version == dataset.version,
                dataset_tasks.c.position >= offset,
                dataset_tasks.c.position < offset + limit,
            )
            .order_by(dataset_tasks.c.position)
        ).all()
    return [
        TaskRef(
            position=row.position,
            name=row.task_name,
            digest=row.digest,
            package_key=row.package_key,
            package_sha256=row.package_sha256,
        )
        for row in rows
    ]
