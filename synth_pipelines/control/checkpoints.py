"""Checkpoints: usable model state a batch produced, with its lineage and cursor."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Engine, Row, insert, select
from sqlalchemy.exc import IntegrityError

from synth_pipelines.control.schema import checkpoints


@dataclass(frozen=True)
class Checkpoint:
    sampler_path: str
    run_id: str
    batch: str
    batch_index: int
    state_path: str
    base_model: str
    owner: str
    dataset_cursor: int
    optimizer_steps: int
    created_at: datetime

    def as_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "created_at": self.created_at.isoformat()}


def _checkpoint(row: Row[Any]) -> Checkpoint:
    created = row.created_at if row.created_at.tzinfo else row.created_at.replace(tzinfo=UTC)
    return Checkpoint(
        row.sampler_path,
        row.run_id,
        row.batch,
        row.batch_index,
        row.state_path,
        row.base_model,
        row.owner,
        row.dataset_cursor,
        row.optimizer_steps,
        created,
    )


def record_checkpoint(engine: Engine, checkpoint: Checkpoint) -> Checkpoint:
    """Idempotent: recording the same sampler path again returns the first record."""
    try:
        with engine.begin() as conn:
            conn.execute(insert(checkpoints).values(**checkpoint.__dict__))
    except IntegrityError:
        existing = find_checkpoint(engine, checkpoint.sampler_path)
        if existing is None:
            raise
        return existing
    return checkpoint


def find_checkpoint(engine: Engine, sampler_path: str) -> Checkpoint | None:
    with engine.connect() as conn:
        row = conn.execute(
            select(checkpoints).where(checkpoints.c.sampler_path == sampler_path)
        ).first()
    return _checkpoint(row) if row else None


def run_checkpoints(engine: Engine, run_id: str) -> list[Checkpoint]:
    with engine.connect() as conn:
        rows = conn.execute(
            select(checkpoints)
            .where(checkpoints.c.run_id == run_id)
            .order_by(checkpoints.c.batch_index)
        ).all()
    return [_checkpoint(row) for row in rows]


def batch_checkpoint(engine: Engine, run_id: str, batch_index: int) -> Checkpoint | None:
    with engine.connect() as conn:
        row = conn.execute(
            select(checkpoints).where(
                checkpoints.c.run_id == run_id, checkpoints.c.batch_index == batch_index
            )
        ).first()
    return _checkpoint(row) if row else None


def newest_checkpoint(engine: Engine, owner: str) -> Checkpoint | None:
    with engine.connect() as conn:
        row = conn.execute(
            select(checkpoints)
            .where(checkpoints.c.owner == owner)
            .order_by(checkpoints.c.created_at.desc())
            .limit(1)
        ).first()
    return _checkpoint(row) if row else None
