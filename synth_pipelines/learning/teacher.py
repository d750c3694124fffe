"""A teacher for a native harness: the script that answers its calls with a dataset's
demonstrations, for a scripted model service (`synth model serve --scripted`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sqlalchemy import Engine

from synth_pipelines.contracts.dataset import DatasetVersion
from synth_pipelines.learning.demonstrations import (
    Demonstration,
    read_demonstration,
    teacher_script,
)
from synth_pipelines.registry.datasets import read_page
from synth_pipelines.registry.task_packages import materialize_task
from synth_pipelines.rendering.adapters.base import ModelAdapter
from synth_pipelines.storage.objectstore import ObjectStore

PAGE = 500


def dataset_demonstrations(
    engine: Engine,
    store: ObjectStore,
    dataset: DatasetVersion,
    harness: str,
    cache: Path,
    limit: int | None = None,
) -> Iterator[Demonstration]:
    """Each task's demonstration for `harness` (an engine), in dataset order."""
    count = dataset.task_count if limit is None else min(limit, dataset.task_count)
    for offset in range(0, count, PAGE):
        for ref in read_page(engine, dataset, offset, min(PAGE, count - offset)):
            yield read_demonstration(Path(materialize_task(store, ref, cache)), harness)


def dataset_script(
    adapter: ModelAdapter, demonstrations: Iterator[Demonstration]
) -> tuple[list[dict[str, Any]], int]:
    """The teacher's script for every demonstration, and how many tasks it covers."""
    entries: list[dict[str, Any]] = []
    tasks = 0
    for demonstration in demonstrations:
        entries.extend(teacher_script(adapter, demonstration))
        tasks += 1
    return entries, tasks
