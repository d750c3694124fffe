"""A batch's policy update and the checkpoint that binds the next batch.

The update waits for every group's gradients, marks itself unresolved durably, enqueues
the optimizer step, saves the trainer state and only then records the acknowledgement.
An acknowledged update is never applied again; an unresolved one stops the run until an
operator resolves it. A batch with no usable signal applies no step: that is a recipe
failure, recorded loudly (`batch.no_signal`), never a silent no-op. The checkpoint records
sampler weights, trainer state, the dataset cursor and acknowledged progress, and
completes the batch. Database calls run in threads: the batch's event loop never waits.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime

import tinker
from sqlalchemy import Engine

from synth_pipelines.contracts.batch_learning import BatchLearning
from synth_pipelines.contracts.checkpoint import Checkpoint
from synth_pipelines.contracts.learning import DatumRow, PolicyBinding, same_datums
from synth_pipelines.contracts.run_spec import RunSpec, batch_key
from synth_pipelines.control.checkpoints import batch_checkpoint, find_checkpoint, record_checkpoint
from synth_pipelines.control.policy_updates import (
    UnresolvedUpdateError,
    acknowledge,
    find_update,
    mark_unresolved,
    record_without_step,
    refuse_if_unresolved,
)
from synth_pipelines.control.worker_claim import WorkerClaim
from synth_pipelines.learning.trainer import Trainer


def no_signal_reason(signal: BatchLearning) -> str:
    dropped = ", ".join(f"{count} {why}" for why, count in signal.groups_dropped.items())
    return (
        f"no usable learning signal: 0 of {signal.groups} groups qualified"
        + (f" ({dropped})" if dropped else "")
        + "; the recipe needs groups whose attempts score differently"
    )


async def apply_update(
    engine: Engine,
    spec: RunSpec,
    index: int,
    trainer: Trainer,
    rows: list[DatumRow],
    signal: BatchLearning,
) -> BatchLearning:
    """Apply the batch's one optimizer step over `rows` (submitted group by group, or now);
    returns the batch's learning numbers, `signal`'s and the step's."""
    batch = batch_key(spec.run_id, index)
    await asyncio.to_thread(refuse_if_unresolved, engine, spec.run_id)
    existing = await asyncio.to_thread(find_update, engine, spec.run_id, batch)
    if existing is not None and existing.status == "acknowledged":
        return existing.metrics
    submitted = trainer.submitted_rows()
    if not same_datums(submitted, rows):
        if submitted:
            raise UnresolvedUpdateError(
                f"the datums submitted while {batch} sampled differ from its datums table"
            )
        await trainer.submit(rows)
    learning_rate = trainer.plan.learning_rate
    if not rows:
        reason = no_signal_reason(signal)
        learning = signal.model_copy(update={"optimizer_step": False, "no_step_reason": reason})
        await trainer.training_client()
        state = await trainer.save_state(f"{batch}-update")
        await asyncio.to_thread(
            record_without_step, engine, spec.run_id, batch, index, state, reason, learning
        )
        return learning
    gradients = await trainer.gradients()
    await asyncio.to_thread(mark_unresolved, engine, spec.run_id, batch, index, len(rows))
    started = time.monotonic()
    optimizer = await trainer.optim_step()
    learning = signal.model_copy(
        update={
            "optimizer_step": True,
            "learning_rate": learning_rate,
            "loss": gradients.loss,
            "grad_norm": optimizer.get("grad_norm:mean"),
            "entropy": gradients.entropy,
            "kl_sample_train_v1": gradients.kl_sample_train_v1,
            "kl_sample_train_v2": gradients.kl_sample_train_v2,
            "datums": gradients.datums,
            "action_tokens": gradients.action_tokens,
            "forward_backward_sec": gradients.seconds,
            "optim_step_sec": time.monotonic() - started,
        }
    )
    state = await trainer.save_state(f"{batch}-update")
    await asyncio.to_thread(acknowledge, engine, spec.run_id, batch, state, learning)
    return learning


def _optimizer_steps(engine: Engine, spec: RunSpec, binding: PolicyBinding, index: int) -> int:
    if index > 0:
        previous = batch_checkpoint(engine, spec.run_id, index - 1)
        assert previous is not None
        return previous.optimizer_steps
    if binding.optimizer_state and binding.sampler.startswith("tinker://"):
        start = find_checkpoint(engine, binding.sampler)
        return start.optimizer_steps if start is not None else 0
    return 0


def _record(
    engine: Engine,
    claim: WorkerClaim,
    spec: RunSpec,
    index: int,
    binding: PolicyBinding,
    sampler_path: str,
    state_path: str,
    learning: BatchLearning,
) -> Checkpoint:
    stepped = 1 if learning.optimizer_step else 0
    checkpoint = record_checkpoint(
        engine,
        Checkpoint(
            sampler_path=sampler_path,
            run_id=spec.run_id,
            batch=batch_key(spec.run_id, index),
            batch_index=index,
            state_path=state_path,
            base_model=binding.base_model,
            owner=spec.owner,
            dataset_cursor=(index + 1) * spec.tasks_per_batch,
            optimizer_steps=_optimizer_steps(engine, spec, binding, index) + stepped,
            created_at=datetime.now(UTC),
        ),
    )
    _complete(claim, spec, checkpoint, learning)
    return checkpoint


def _complete(
    claim: WorkerClaim, spec: RunSpec, checkpoint: Checkpoint, learning: BatchLearning
) -> None:
    claim.complete(
        spec,
        {
            "checkpoint": checkpoint.sampler_path,
            "dataset_cursor": checkpoint.dataset_cursor,
            "optimizer_steps": checkpoint.optimizer_steps,
            **{
                name: value
                for name, value in learning.recorded().items()
                if isinstance(value, int | float | str | dict)
            },
        },
    )


async def commit_checkpoint(
    engine: Engine,
    claim: WorkerClaim,
    spec: RunSpec,
    index: int,
    trainer: Trainer,
    binding: PolicyBinding,
    learning: BatchLearning,
) -> Checkpoint:
    existing = await asyncio.to_thread(batch_checkpoint, engine, spec.run_id, index)
    if existing is not None:
        # Committed by a worker that stopped before it recorded the batch's completion.
        await asyncio.to_thread(_complete, claim, spec, existing, learning)
        return existing
    batch = batch_key(spec.run_id, index)
    acknowledged = await asyncio.to_thread(find_update, engine, spec.run_id, batch)
    if acknowledged is None or acknowledged.status != "acknowledged" or not acknowledged.state_path:
        raise UnresolvedUpdateError(f"{batch} has no acknowledged update to checkpoint")
    if trainer.saved_state != acknowledged.state_path:
        # A batch resumed after its update: the acknowledged state is the one to sample.
        await trainer.restore(acknowledged.state_path)
    try:
        sampler = await trainer.save_sampler(batch)
    except (tinker.TinkerError, OSError):
        if trainer.reconnect is None:
            raise
        # The backend lost the client (a restart): the acknowledged state is durable.
        await trainer.restore(acknowledged.state_path, reconnect=True)
        sampler = await trainer.save_sampler(batch)
    return await asyncio.to_thread(
        _record,
        engine,
        claim,
        spec,
        index,
        binding,
        sampler,
        acknowledged.state_path,
        learning,
    )
