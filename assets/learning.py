"""The learning assets of a training batch: qualified groups, datums, the policy update
and the checkpoint that binds the next batch.

The learning code (tinker-cookbook, and torch under it) is imported inside the asset
bodies, so loading the code location stays fast for every other job."""

import dagster as dg
import pyarrow as pa

from assets.captured_interactions import captured_interactions
from assets.curve_metadata import curve_metadata
from assets.partitions import batches
from resources.control_database import ControlDatabase
from resources.object_store import ObjectStoreResource
from resources.training import TrainingService
from synth_pipelines.contracts.assessment import Assessment
from synth_pipelines.contracts.learning import DatumRow, PolicyBinding, QualifiedAttempt
from synth_pipelines.contracts.plan import TrainPlan
from synth_pipelines.contracts.run_spec import RunSpec, batch_key, parse_batch_key
from synth_pipelines.contracts.trial import TrialOutcome
from synth_pipelines.control.policy_updates import UnresolvedUpdateError
from synth_pipelines.control.runs import get_run
from synth_pipelines.control.table_outputs import load_table
from synth_pipelines.evidence.flush import flush_evidence


def _train_spec(control: ControlDatabase, partition: str) -> tuple[RunSpec, int, TrainPlan]:
    run_id, index = parse_batch_key(partition)
    spec = get_run(control.engine(), run_id).spec
    assert isinstance(spec.plan, TrainPlan), f"run {run_id} is not a training run"
    return spec, index, spec.plan


@dg.asset(
    partitions_def=batches,
    io_manager_key="table_io",
    group_name="batches",
    deps=[captured_interactions],
    kinds={"parquet"},
)
def qualified_groups(
    context: dg.AssetExecutionContext,
    trials: pa.Table,
    assessments: pa.Table,
    policy: pa.Table,
    control: ControlDatabase,
    objects: ObjectStoreResource,
) -> dg.Output[pa.Table]:
    from synth_pipelines.learning.batch_learning import learn_from

    spec, _, plan = _train_spec(control, context.partition_key)
    (binding,) = PolicyBinding.from_table(policy)
    flush_evidence(spec.run_id)
    learned = learn_from(
        control.engine(),
        objects.store(),
        plan,
        binding.sampler,
        TrialOutcome.from_table(trials),
        Assessment.from_table(assessments),
    )
    standings = learned.standings
    exclusions: dict[str, int] = {}
    for standing in standings:
        reason = standing.exclusion or standing.group_exclusion
        if reason:
            key = reason.split(":")[0]
            exclusions[key] = exclusions.get(key, 0) + 1
    rewards = [s.reward for s in standings if s.reward is not None]
    return dg.Output(
        QualifiedAttempt.to_table(standings),
        metadata={
            "attempts": len(standings),
            "qualified_attempts": sum(s.qualified for s in standings),
            "groups": len({s.group_index for s in standings}),
            "qualified_groups": len({s.group_index for s in standings if s.group_qualified}),
            "exclusions": dg.MetadataValue.json(exclusions),
            "reward_mean": dg.MetadataValue.float(sum(rewards) / len(rewards) if rewards else 0.0),
            "evidence_chunks": learned.evidence_chunks,
            "evidence_bytes": learned.evidence_bytes,
        },
    )


@dg.asset(
    partitions_def=batches, io_manager_key="table_io", group_name="batches", kinds={"parquet"}
)
def datums(
    context: dg.AssetExecutionContext,
    trials: pa.Table,
    assessments: pa.Table,
    qualified_groups: pa.Table,
    policy: pa.Table,
    control: ControlDatabase,
    objects: ObjectStoreResource,
) -> dg.Output[pa.Table]:
    from synth_pipelines.learning.batch_learning import learn_from

    _, _, plan = _train_spec(control, context.partition_key)
    (binding,) = PolicyBinding.from_table(policy)
    learned = learn_from(
        control.engine(),
        objects.store(),
        plan,
        binding.sampler,
        TrialOutcome.from_table(trials),
        Assessment.from_table(assessments),
    )
    if learned.standings != QualifiedAttempt.from_table(qualified_groups):
        raise dg.Failure(
            description="the evidence read now qualifies attempts differently from "
            "qualified_groups; evidence changed after qualification"
        )
    rows = learned.datums
    return dg.Output(
        DatumRow.to_table(rows),
        metadata={
            "datums": len(rows),
            "tokens": sum(len(r.model_input) for r in rows),
            "action_tokens": int(sum(sum(r.mask) for r in rows)),
            "attempts": len({r.attempt_id for r in rows}),
        },
    )


@dg.asset(partitions_def=batches, group_name="batches", kinds={"tinker"})
def policy_update(
    context: dg.AssetExecutionContext,
    datums: pa.Table,
    policy: pa.Table,
    control: ControlDatabase,
    training: TrainingService,
) -> dg.MaterializeResult:
    from synth_pipelines.learning.update import apply_update

    spec, index, plan = _train_spec(control, context.partition_key)
    (binding,) = PolicyBinding.from_table(policy)
    update = training.update_for(binding, plan)
    try:
        result = apply_update(control.engine(), spec, index, update, DatumRow.from_table(datums))
    except UnresolvedUpdateError as error:
        raise dg.Failure(description=str(error)) from None
    return dg.MaterializeResult(
        metadata={key: value for key, value in result.items() if value is not None}
    )


def _reward_curve(
    control: ControlDatabase, objects: ObjectStoreResource, spec: RunSpec, index: int
) -> dict:
    """The run's mean reward per batch so far, as a PNG in the object store and inline."""
    from synth_pipelines.learning.curves import reward_curve_png

    store = objects.store()
    rewards = []
    for k in range(index + 1):
        standings = QualifiedAttempt.from_table(
            load_table(control.engine(), store, "qualified_groups", batch_key(spec.run_id, k))
        )
        scored = [s.reward for s in standings if s.reward is not None]
        rewards.append(sum(scored) / len(scored) if scored else 0.0)
    png = reward_curve_png(rewards, f"{spec.run_id}: mean reward per batch")
    return {
        **curve_metadata(
            store, f"runs/{spec.run_id}/reward-curve-b{index:04d}.png", png, "reward_curve"
        ),
        "reward_mean": dg.MetadataValue.float(rewards[-1]),
    }


@dg.asset(partitions_def=batches, group_name="batches", deps=[policy_update], kinds={"tinker"})
def checkpoints(
    context: dg.AssetExecutionContext,
    policy: pa.Table,
    control: ControlDatabase,
    objects: ObjectStoreResource,
    training: TrainingService,
) -> dg.MaterializeResult:
    from synth_pipelines.learning.update import commit_checkpoint

    spec, index, plan = _train_spec(control, context.partition_key)
    (binding,) = PolicyBinding.from_table(policy)
    checkpoint = commit_checkpoint(
        control.engine(), spec, index, training.update_for(binding, plan), binding
    )
    return dg.MaterializeResult(
        metadata={
            "sampler": checkpoint.sampler_path,
            "state": checkpoint.state_path,
            "dataset_cursor": checkpoint.dataset_cursor,
            "optimizer_steps": checkpoint.optimizer_steps,
            "binds": f"policy of batch {index + 1}" if index + 1 < spec.batch_count else "",
            **_reward_curve(control, objects, spec, index),
        }
    )
