"""Whose a run or a checkpoint is: only its owner may read it, steer it, sample or train from it.

The CLI acts for the owner named by `SYNTH_OWNER`; the capture proxy for the owner in a
scoped token's signed claims. Refusals name the thing asked for, never the other owner.
"""

from __future__ import annotations

from sqlalchemy import Engine

from synth_pipelines.contracts.checkpoint import Checkpoint
from synth_pipelines.contracts.run_record import RunRecord
from synth_pipelines.control.checkpoints import find_checkpoint
from synth_pipelines.control.runs import get_run


class NotOwnerError(PermissionError):
    """The run or checkpoint exists but belongs to another owner."""


class UnknownCheckpointError(LookupError):
    """A `tinker://` model the platform never recorded as a checkpoint."""


def owned_run(engine: Engine, run_id: str, owner: str) -> RunRecord:
    run = get_run(engine, run_id)
    if run.owner != owner:
        raise NotOwnerError(
            f"run {run_id} belongs to another owner; you act as {owner!r} (SYNTH_OWNER), and "
            "only a run's owner may read or steer it"
        )
    return run


def owned_checkpoint(engine: Engine, sampler_path: str, owner: str) -> Checkpoint:
    checkpoint = find_checkpoint(engine, sampler_path)
    if checkpoint is None:
        raise UnknownCheckpointError(
            f"model {sampler_path} is not a known checkpoint; `synth run checkpoints <run>` "
            "lists the checkpoints of your runs"
        )
    if checkpoint.owner != owner:
        raise NotOwnerError(
            f"checkpoint {sampler_path} belongs to another owner; you act as {owner!r} "
            "(SYNTH_OWNER), and only a checkpoint's owner may sample, read or train from it"
        )
    return checkpoint
