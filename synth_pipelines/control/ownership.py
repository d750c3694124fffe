"""Whose a checkpoint is: only its owner may sample from it or start a run from it.

The gateway acts for the owner of the request's API key; the capture proxy for the owner
in a scoped token's signed claims. Refusals name the thing asked for, never the other owner.
"""

from __future__ import annotations

from sqlalchemy import Engine

from synth_pipelines.contracts.checkpoint import Checkpoint
from synth_pipelines.control.checkpoints import find_checkpoint


class UnknownCheckpointError(LookupError):
    """A `tinker://` model the platform never recorded as a checkpoint."""


def owned_checkpoint(engine: Engine, sampler_path: str, owner: str) -> Checkpoint:
    """`owner`'s checkpoint at `sampler_path`; another owner's is refused exactly as one
    never recorded, so a refusal never tells that it exists."""
    checkpoint = find_checkpoint(engine, sampler_path)
    if checkpoint is None or checkpoint.owner != owner:
        raise UnknownCheckpointError(
            f"model {sampler_path} is not a known checkpoint; `synth run checkpoints <run>` "
            "lists the checkpoints of your runs"
        )
    return checkpoint
