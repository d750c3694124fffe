"""Which sampling groups make up a batch: one page of the dataset, read on demand.

A group is one task x the run's fixed recipe x N attempts. Attempt ids are derived
from the batch key, so a re-executed batch addresses the same attempts again.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Engine

from synth_pipelines.contracts.dataset import TaskRef
from synth_pipelines.contracts.plan import TrainPlan
from synth_pipelines.contracts.run_spec import RunSpec, batch_key
from synth_pipelines.registry.datasets import get_dataset, read_page


@dataclass(frozen=True)
class SamplingGroup:
    batch: str
    index: int
    task: TaskRef
    attempt_ids: tuple[str, ...]


@dataclass(frozen=True)
class BatchPlan:
    run_id: str
    batch: str
    index: int
    dataset_cursor: int
    groups: tuple[SamplingGroup, ...]

    @property
    def attempt_count(self) -> int:
        return sum(len(group.attempt_ids) for group in self.groups)


def attempt_id(batch: str, group: int, attempt: int) -> str:
    return f"{batch}.g{group:04d}.a{attempt:03d}"


def _positions(spec: RunSpec, index: int) -> list[int]:
    per_batch = spec.tasks_per_batch
    start = index * per_batch
    if isinstance(spec.plan, TrainPlan):
        # Training walks the dataset as a ring: epochs wrap around the task list.
        return [(start + i) % spec.task_limit for i in range(per_batch)]
    return list(range(start, min(start + per_batch, spec.task_limit)))


def _segments(positions: list[int]) -> list[tuple[int, int]]:
    """Contiguous (start, length) page reads covering the positions."""
    segments: list[tuple[int, int]] = []
    for position in sorted(set(positions)):
        if segments and segments[-1][0] + segments[-1][1] == position:
            segments[-1] = (segments[-1][0], segments[-1][1] + 1)
        else:
            segments.append((position, 1))
    return segments


def plan_batch(engine: Engine, spec: RunSpec, index: int) -> BatchPlan:
    if not 0 <= index < spec.batch_count:
        raise ValueError(f"run {spec.run_id} has batches 0..{spec.batch_count - 1}, not {index}")
    key = batch_key(spec.run_id, index)
    positions = _positions(spec, index)
    dataset = get_dataset(engine, spec.dataset.ref)
    if dataset.digest != spec.dataset.digest:
        raise ValueError(
            f"dataset {spec.dataset.ref} now has digest {dataset.digest}, not the pinned "
            f"{spec.dataset.digest}"
        )
    by_position: dict[int, TaskRef] = {}
    for start, length in _segments(positions):
        by_position.update({t.position: t for t in read_page(engine, dataset, start, length)})
    groups = tuple(
        SamplingGroup(
            batch=key,
            index=g,
            task=by_position[position],
            attempt_ids=tuple(attempt_id(key, g, a) for a in range(spec.attempts_per_task)),
        )
        for g, position in enumerate(positions)
    )
    return BatchPlan(spec.run_id, key, index, positions[0] if positions else 0, groups)
