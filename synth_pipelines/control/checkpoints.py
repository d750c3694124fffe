"""Checkpoints: usable model state a batch produced, with its lineage and cursor."""

from __future__ import annotations

from sqlalchemy import Engine, insert, select
from sqlalchemy.exc import IntegrityError

from synth_pipelines.contracts.checkpoint import Checkpoint
from synth_pipelines.control.schema import checkpoints


def record_checkpoint(engine: Engine, checkpoint: Checkpoint) -> Checkpoint:
    """Idempotent: recording the same sampler path again returns the first record."""
    try:
        with engine.begin() as conn:
            conn.execute(insert(checkpoints).values(**checkpoint.model_dump()))
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
    return Checkpoint.model_validate(row, from_attributes=True) if row else None


def run_checkpoints(engine: Engine, run_id: str) -> list[Checkpoint]:
    with engine.connect() as conn:
        rows = conn.execute(
            select(checkpoints)
            .where(checkpoints.c.run_id == run_id)
            .order_by(checkpoints.c.batch_index)
        ).all()
    return [Checkpoint.model_validate(row, from_attributes=True) for row in rows]


def batch_checkpoint(engine: Engine, run_id: str, batch_index: int) -> Checkpoint | None:
    with engine.connect() as conn:
        row = conn.execute(
            select(checkpoints).where(
                checkpoints.c.run_id == run_id, checkpoints.c.batch_index == batch_index
            )
        ).first()
    return Checkpoint.model_validate(row, from_attributes=True) if row else None


def newest_checkpoint(engine: Engine, owner: str) -> Checkpoint | None:
    with engine.connect() as conn:
        row = conn.execute(
            select(checkpoints)
            .where(checkpoints.c.owner == owner)
            .order_by(checkpoints.c.created_at.desc())
            .limit(1)
        ).first()
    return Checkpoint.model_validate(row, from_attributes=True) if row else None
