"""An example schedule: every night, evaluate the newest checkpoint on a held-out dataset.

It accepts an evaluation run exactly as `synth run start --model <checkpoint>` would, once
per night and checkpoint thanks to the idempotency key, and pins it (`run_spec[run]`, tagged
with the run's dataset, actor and model) so the night's evaluation shows on the schedule's
page; the batch gate then runs its batches like any accepted run's.
Configure it with SYNTH_NIGHTLY_DATASET (e.g. `synth/heldout@v1`), SYNTH_NIGHTLY_ACTOR (a
published profile `org/name@version`) and optionally SYNTH_NIGHTLY_PLAN (a plan as JSON);
it is stopped by default: turn it on in the UI.
"""

import dagster as dg

from assets.partitions import RUNS
from assets.run_tags import run_tags
from resources.control_database import ControlDatabase
from synth_pipelines.config import Settings
from synth_pipelines.contracts.operator_key import LOCAL_ORG
from synth_pipelines.control.checkpoints import newest_checkpoint
from synth_pipelines.runtime.served_models import ModelNotServedError, served_models
from synth_pipelines.submission.errors import SubmissionError
from synth_pipelines.submission.run_requests import Submission, submit_run


@dg.schedule(
    cron_schedule="0 3 * * *",
    target=dg.AssetSelection.keys("run_spec"),
    default_status=dg.DefaultScheduleStatus.STOPPED,
)
def nightly_checkpoint_evaluation(
    context: dg.ScheduleEvaluationContext,
    control: ControlDatabase,
    deployment: dg.ResourceParam[Settings],
) -> dg.SkipReason | dg.RunRequest:
    dataset, actor = deployment.nightly_dataset, deployment.nightly_actor
    if not dataset or not actor:
        return dg.SkipReason(
            "set SYNTH_NIGHTLY_DATASET and SYNTH_NIGHTLY_ACTOR to evaluate nightly"
        )
    engine = control.engine()
    checkpoint = newest_checkpoint(engine, deployment.owner)
    if checkpoint is None:
        return dg.SkipReason("no checkpoint has been committed yet")
    night = context.scheduled_execution_time.strftime("%Y-%m-%d")
    try:
        run, created = submit_run(
            engine,
            Submission(
                dataset=dataset,
                actor=actor,
                plan=deployment.nightly_plan,
                model=checkpoint.sampler_path,
                kinds=("eval",),
            ),
            deployment.owner,
            idempotency_key=f"nightly-{night}-{checkpoint.sampler_path}",
            org=LOCAL_ORG,
            models=served_models(deployment, deployment.owner),
        )
    except (SubmissionError, ModelNotServedError) as error:
        return dg.SkipReason(f"cannot evaluate {checkpoint.sampler_path}: {error}")
    context.log.info(
        f"{'accepted' if created else 'already accepted'} run {run.run_id} evaluating "
        f"{checkpoint.sampler_path} on {dataset}"
    )
    # A schedule cannot request partitions as a sensor does; the gate adds the same one.
    if not context.instance.has_dynamic_partition(RUNS, run.run_id):
        context.instance.add_dynamic_partitions(RUNS, [run.run_id])
    return dg.RunRequest(run_key=f"spec:{run.run_id}", partition_key=run.run_id, tags=run_tags(run))
