"""A batch's policy update and the checkpoint that binds the next batch.

The update waits for every group's gradients, marks itself unresolved durably, enqueues
the optimizer step, saves the trainer state and only then records the acknowledgement.
An acknowledged update is never applied again; an unresolved one stops the run until an
operator resolves it. The checkpoint records sampler weights, trainer state, the dataset
cursor and acknowledged progress, and completes the batch.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from sqlalchemy import Engine

from synth_pipelines.contracts.learning import DatumRow, PolicyBinding
from synth_pipelines.contracts.run_spec import RunSpec, batch_key
from synth_pipelines.control.checkpoints import (
    Checkpoint,
    batch_checkpoint,
    find_checkpoint,
    record_checkpoint,
)
from synth_pipelines.control.policy_updates import (
    UnresolvedUpdateError,
    acknowledge,
    find_update,
    mark_unresolved,
    record_without_step,
    refuse_if_unresolved,
)
from synth_pipelines.learning.trainer import BatchUpdate
from synth_pipelines.runtime.lifecycle import complete_batch


def _row_key(row: DatumRow) -> tuple[str, str, int]:
    return (row.attempt_id, row.agent_id, row.datum_index)


def apply_update(
    engine: Engine, spec: RunSpec, index: int, update: BatchUpdate, rows: list[DatumRow]
) -> dict:
    batch = batch_key(spec.run_id, index)
    refuse_if_unresolved(engine, spec.run_id)
    existing = find_update(engine, spec.run_id, batch)
    if existing is not None and existing.status == "acknowledged":
        return {"status": "acknowledged earlier", "state": existing.state_path, **existing.metrics}
    submitted = sorted(update.submitted_rows(), key=_row_key)
    if submitted != sorted(rows, key=_row_key):
        if submitted:
            raise UnresolvedUpdateError(
                f"the datums submitted while {batch} sampled differ from its datums table"
            )
        asyncio.run(update.submit(rows))
    if not rows:
        asyncio.run(update.training_client())
        state = update.save_state(f"{batch}-update")
        record_without_step(engine, spec.run_id, batch, index, state)
        return {"status": "no eligible learning contributions", "state": state}
    gradients = update.gradients()
    mark_unresolved(engine, spec.run_id, batch, index, len(rows))
    metrics = {**update.optim_step(), **gradients.as_dict(), "optimizer_step": True}
    state = update.save_state(f"{batch}-update")
    acknowledge(engine, spec.run_id, batch, state, metrics)
    return {"status": "acknowledged", "state": state, **metrics}


def _optimizer_steps(engine: Engine, spec: RunSpec, binding: PolicyBinding, index: int) -> int:
    if index > 0:
        previous = batch_checkpoint(engine, spec.run_id, index - 1)
        assert previous is not None
        return previous.optimizer_steps
    if binding.optimizer_state and binding.sampler.startswith("tinker://"):
        start = find_checkpoint(engine, binding.sampler)
        return start.optimizer_steps if start is not None else 0
    return 0


def commit_checkpoint(
    engine: Engine, spec: RunSpec, index: int, update: BatchUpdate, binding: PolicyBinding
) -> Checkpoint:
    existing = batch_checkpoint(engine, spec.run_id, index)
    if existing is not None:
        return existing
    batch = batch_key(spec.run_id, index)
    acknowledged = find_update(engine, spec.run_id, batch)
    if acknowledged is None or acknowledged.status != "acknowledged" or not acknowledged.state_path:
        raise UnresolvedUpdateError(f"{batch} has no acknowledged update to checkpoint")
    if update.client is None:
        update.client = update.service.create_training_client_from_state_with_optimizer(
            acknowledged.state_path
        ).result()
    stepped = 1 if acknowledged.metrics.get("optimizer_step", True) is not False else 0
    checkpoint = record_checkpoint(
        engine,
        Checkpoint(
            sampler_path=update.save_sampler(batch),
            run_id=spec.run_id,
            batch=batch,
            batch_index=index,
            state_path=acknowledged.state_path,
            base_model=binding.base_model,
            owner=spec.owner,
            dataset_cursor=(index + 1) * spec.tasks_per_batch,
            optimizer_steps=_optimizer_steps(engine, spec, binding, index) + stepped,
            created_at=datetime.now(UTC),
        ),
    )
    complete_batch(
        engine,
        spec,
        index,
        {
            "checkpoint": checkpoint.sampler_path,
            "dataset_cursor": checkpoint.dataset_cursor,
            "optimizer_steps": checkpoint.optimizer_steps,
            **{k: v for k, v in acknowledged.metrics.items() if isinstance(v, int | float)},
        },
    )
    return checkpoint
