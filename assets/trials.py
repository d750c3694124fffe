"""`trials[batch]`: every attempt of the batch's sampling groups, run as Harbor trials.

Every attempt samples through the batch's policy. In a training run, a group whose
attempts are all assessed is qualified, packed and submitted to `forward_backward` at once,
while other groups of the batch are still sampling."""

import dagster as dg
import pyarrow as pa

from assets.partitions import batches
from resources.control_database import ControlDatabase
from resources.object_store import ObjectStoreResource
from resources.training import TrainingService
from synth_pipelines.config import settings
from synth_pipelines.contracts.learning import PolicyBinding
from synth_pipelines.contracts.plan import TrainPlan
from synth_pipelines.contracts.run_spec import parse_batch_key
from synth_pipelines.contracts.trial import TrialOutcome
from synth_pipelines.control.runs import get_run
from synth_pipelines.evidence.flush import flush_evidence
from synth_pipelines.runtime.assessing import Assessor, trial_assessment
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
    context: dg.AssetExecutionContext,
    policy: pa.Table,
    control: ControlDatabase,
    objects: ObjectStoreResource,
    training: TrainingService,
) -> dg.Output[pa.Table]:
    engine, store = control.engine(), objects.store()
    run_id, index = parse_batch_key(context.partition_key)
    spec = get_run(engine, run_id).spec
    (binding,) = PolicyBinding.from_table(policy)
    plan = plan_batch(engine, spec, index)
    start_batch(engine, spec, index, plan.attempt_count)
    context.log.info(
        f"batch {plan.batch}: {len(plan.groups)} groups, {plan.attempt_count} attempts, "
        f"sampling through {binding.sampler}"
    )
    done = 0

    def progress(outcome: TrialOutcome) -> None:
        nonlocal done
        done += 1
        context.log.info(
            f"[{done}/{plan.attempt_count}] {outcome.attempt_id} {outcome.task_name}: "
            f"{outcome.status} rewards={outcome.rewards_json}"
        )

    on_group = None
    if isinstance(spec.plan, TrainPlan):
        from synth_pipelines.learning.batch_learning import learn_from

        update = training.update_for(binding, spec.plan)

        async def on_group(outcomes: list[TrialOutcome]) -> None:
            flush_evidence(run_id)
            learned = learn_from(
                engine,
                store,
                spec.plan,
                binding.sampler,
                outcomes,
                [trial_assessment(o, Assessor.of(spec.judge)) for o in outcomes],
            )
            await update.submit(learned.datums)
            context.log.info(
                f"group {outcomes[0].group_index} ready: {len(learned.datums)} datums submitted "
                "to forward_backward"
            )

    outcomes = await run_batch_trials(
        spec,
        plan,
        store,
        engine,
        settings().work_dir,
        model=binding.sampler or None,
        verify=spec.kind in ("eval", "train"),
        on_outcome=progress,
        on_group=on_group,
    )
    failed = sum(outcome.status != "completed" for outcome in outcomes)
    if spec.kind == "execute":
        complete_batch(engine, spec, index, {"attempts": len(outcomes), "failed": failed})
    return dg.Output(
        TrialOutcome.to_table(outcomes),
        metadata={
            "run": run_id,
            "dataset": spec.dataset.ref,
            "dataset_cursor": plan.dataset_cursor,
            "groups": len(plan.groups),
            "attempts": len(outcomes),
            "failed": failed,
            "sampler": binding.sampler,
            "actor_digest": spec.actor.digest,
        },
    )
