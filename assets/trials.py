"""`trials[batch]`: every attempt of the batch's sampling groups, run as Harbor trials."""

import dagster as dg
import pyarrow as pa

from assets.partitions import batches
from resources.control_database import ControlDatabase
from resources.object_store import ObjectStoreResource
from synth_pipelines.config import settings
from synth_pipelines.contracts.run_spec import parse_batch_key
from synth_pipelines.contracts.trial import TrialOutcome
from synth_pipelines.control.runs import get_run
from synth_pipelines.runtime.batch_plan import plan_batch
from synth_pipelines.runtime.lifecycle import complete_batch, start_batch
from synth_pipelines.runtime.trial_batch import run_batch_trials


@dg.asset(
    partitions_def=batches,
    io_manager_key="table_io",
    group_name="batches",
    kinds={"harbor", "parquet"},
)
async def trials(
    context: dg.AssetExecutionContext, control: ControlDatabase, objects: ObjectStoreResource
) -> dg.Output[pa.Table]:
    engine, store = control.engine(), objects.store()
    run_id, index = parse_batch_key(context.partition_key)
    spec = get_run(engine, run_id).spec
    plan = plan_batch(engine, spec, index)
    start_batch(engine, spec, index, plan.attempt_count)
    context.log.info(
        f"batch {plan.batch}: {len(plan.groups)} groups, {plan.attempt_count} attempts"
    )
    done = 0

    def progress(outcome: TrialOutcome) -> None:
        nonlocal done
        done += 1
        context.log.info(
            f"[{done}/{plan.attempt_count}] {outcome.attempt_id} {outcome.task_name}: "
            f"{outcome.status} rewards={outcome.rewards_json}"
        )

    outcomes = await run_batch_trials(
        spec,
        plan,
        store,
        engine,
        settings().work_dir,
        verify=spec.kind == "eval",
        on_outcome=progress,
    )
    failed = sum(outcome.status != "completed" for outcome in outcomes)
    if spec.kind == "execute":
        complete_batch(engine, spec, index, {"attempts": len(outcomes), "failed": failed})
    return dg.Output(
        TrialOutcome.to_table(outcomes),
        metadata={
            "run": run_id,
            "run_spec": dg.MetadataValue.text(f"run_spec[{run_id}]"),
            "dataset": spec.dataset.ref,
            "dataset_cursor": plan.dataset_cursor,
            "groups": len(plan.groups),
            "attempts": len(outcomes),
            "failed": failed,
            "actor_digest": spec.actor.digest,
        },
    )
