"""A checkpoint's lineage both ways: what produced it, and what sampled through it since.

Backwards, a checkpoint names its run, batch and optimizer steps, and the policy update
that produced it. Forwards, a batch samples through a checkpoint when its `policy` table
binds it (the next batch of the same run, or any batch of a run started with it as
`--model`); every sampling group of such a batch was recorded against that checkpoint.
Plain functions over the control database and the object store, so that the gateway and Dagster
metadata read the same lineage.
"""

from __future__ import annotations

from collections import defaultdict

from sqlalchemy import Engine, select

from synth_pipelines.contracts.checkpoint import Checkpoint
from synth_pipelines.contracts.checkpoint_lineage import (
    CheckpointLineage,
    CheckpointSelection,
    SamplingGroup,
)
from synth_pipelines.contracts.learning import PolicyBinding, QualifiedAttempt
from synth_pipelines.contracts.run_spec import RunSpec
from synth_pipelines.contracts.table import TableRow
from synth_pipelines.contracts.trial import TrialOutcome
from synth_pipelines.control.policy_updates import find_update
from synth_pipelines.control.schema import asset_outputs, checkpoints, runs
from synth_pipelines.control.table_outputs import TableMissingError, load_table
from synth_pipelines.storage.objectstore import ObjectStore


class CheckpointNotFoundError(LookupError):
    """No checkpoint of the owner matches the id."""


class AmbiguousCheckpointError(LookupError):
    """More than one checkpoint of the owner matches the id."""


def owner_checkpoints(engine: Engine, owner: str, run_id: str | None = None) -> list[Checkpoint]:
    """The owner's checkpoints, oldest first (of one run, when named)."""
    query = select(checkpoints).where(checkpoints.c.owner == owner)
    if run_id is not None:
        query = query.where(checkpoints.c.run_id == run_id)
    with engine.connect() as conn:
        rows = conn.execute(
            query.order_by(checkpoints.c.created_at, checkpoints.c.batch_index)
        ).all()
    return [Checkpoint.model_validate(row, from_attributes=True) for row in rows]


def resolve_checkpoint(engine: Engine, owner: str, wanted: str) -> Checkpoint:
    """The owner's checkpoint whose path is `wanted`, or the one it is a prefix or suffix of."""
    found = owner_checkpoints(engine, owner)
    exact = [c for c in found if c.sampler_path == wanted]
    matches = exact or [
        c for c in found if c.sampler_path.startswith(wanted) or c.sampler_path.endswith(wanted)
    ]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise CheckpointNotFoundError(
            f"no checkpoint of yours matches {wanted!r}; `synth checkpoint list` lists them"
        )
    raise AmbiguousCheckpointError(
        f"{wanted!r} matches {len(matches)} checkpoints; give more of its path "
        "(`synth checkpoint list` prints whole ids)"
    )


def policy_bindings(engine: Engine, store: ObjectStore, sampler: str) -> list[PolicyBinding]:
    """Every batch whose current policy samples through `sampler`, in batch order."""
    with engine.connect() as conn:
        partitions = conn.execute(
            select(asset_outputs.c.partition)
            .where(asset_outputs.c.asset == "policy")
            .distinct()
            .order_by(asset_outputs.c.partition)
        ).all()
    bound: list[PolicyBinding] = []
    for (partition,) in partitions:
        table = load_table(engine, store, "policy", partition)
        bound.extend(b for b in PolicyBinding.from_table(table) if b.sampler == sampler)
    return bound


def _optional_rows[Row: TableRow](
    engine: Engine, store: ObjectStore, asset: str, batch: str, row_type: type[Row]
) -> list[Row]:
    try:
        return row_type.from_table(load_table(engine, store, asset, batch))
    except TableMissingError:
        return []


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def batch_groups(
    engine: Engine, store: ObjectStore, run_id: str, batch: str
) -> list[SamplingGroup]:
    """The sampling groups of one batch, with their qualification where it was trained."""
    trials: list[TrialOutcome] = _optional_rows(engine, store, "trials", batch, TrialOutcome)
    standings: list[QualifiedAttempt] = _optional_rows(
        engine, store, "qualified_groups", batch, QualifiedAttempt
    )
    by_group: dict[int, list[QualifiedAttempt]] = defaultdict(list)
    for standing in standings:
        by_group[standing.group_index].append(standing)
    attempts: dict[int, list[TrialOutcome]] = defaultdict(list)
    for trial in trials:
        attempts[trial.group_index].append(trial)
    groups = []
    for index in sorted(attempts.keys() | by_group.keys()):
        qualified = by_group.get(index, [])
        rewards = [s.reward for s in qualified if s.reward is not None]
        groups.append(
            SamplingGroup(
                run_id=run_id,
                batch=batch,
                group_index=index,
                task_name=(attempts.get(index) or qualified)[0].task_name,
                attempts=len(attempts.get(index) or qualified),
                mean_reward=_mean(rewards),
                qualified=qualified[0].group_qualified if qualified else None,
                exclusion=qualified[0].group_exclusion if qualified else None,
            )
        )
    return groups


def _runs_with_model(engine: Engine, sampler: str) -> dict[str, tuple[str, str, RunSpec]]:
    with engine.connect() as conn:
        rows = conn.execute(
            select(runs.c.run_id, runs.c.kind, runs.c.status, runs.c.spec_json)
            .where(runs.c.spec_json.contains(sampler))
            .order_by(runs.c.created_at)
        ).all()
    found = {}
    for row in rows:
        spec = RunSpec.model_validate_json(row.spec_json)
        if spec.model == sampler:
            found[row.run_id] = (row.kind, row.status, spec)
    return found


def _run_states(engine: Engine, run_ids: set[str]) -> dict[str, tuple[str, str]]:
    with engine.connect() as conn:
        rows = conn.execute(
            select(runs.c.run_id, runs.c.kind, runs.c.status).where(runs.c.run_id.in_(run_ids))
        ).all()
    return {row.run_id: (row.kind, row.status) for row in rows}


def selections(
    engine: Engine, checkpoint: Checkpoint, bindings: list[PolicyBinding]
) -> list[CheckpointSelection]:
    """Every run that chose the checkpoint, its own run included when a later batch did."""
    as_model = _runs_with_model(engine, checkpoint.sampler_path)
    batches: dict[str, list[str]] = defaultdict(list)
    for binding in bindings:
        batches[binding.run_id].append(binding.batch)
    states = _run_states(engine, set(batches) | set(as_model))
    return [
        CheckpointSelection(
            run_id=run_id,
            kind=states[run_id][0],
            status=states[run_id][1],
            as_model=run_id in as_model,
            policy_batches=tuple(batches.get(run_id, ())),
        )
        for run_id in sorted(states, key=lambda r: (r != checkpoint.run_id, r))
    ]


def checkpoint_lineage(
    engine: Engine, store: ObjectStore, checkpoint: Checkpoint
) -> CheckpointLineage:
    bindings = policy_bindings(engine, store, checkpoint.sampler_path)
    groups = [
        group
        for binding in bindings
        for group in batch_groups(engine, store, binding.run_id, binding.batch)
    ]
    return CheckpointLineage(
        checkpoint=checkpoint,
        update=find_update(engine, checkpoint.run_id, checkpoint.batch),
        groups=tuple(groups),
        selected_by=tuple(selections(engine, checkpoint, bindings)),
    )
