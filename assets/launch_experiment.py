"""`launch_experiment`: submit an experiment from the Dagster Launchpad or GraphQL.

The job takes what `synth run start` takes and goes through the same submission path,
so the validation, the idempotency key and the run it names are the same; the batch
gate then admits the accepted run like any other.
"""

import dagster as dg
from pydantic import Field

from resources.control_database import ControlDatabase
from synth_pipelines.config import settings
from synth_pipelines.control.runs import IdempotencyConflictError
from synth_pipelines.registry.datasets import DatasetError
from synth_pipelines.runtime.served_models import ModelNotServedError, served_models
from synth_pipelines.runtime.submission import Submission, SubmissionError, submit_run


class ExperimentConfig(dg.Config):
    dataset: str = Field(description="Dataset version, org/name@version.")
    actor: str = Field(
        description="Actor profile: @file.json (relative to the project), inline JSON, "
        "or a published org/name@version."
    )
    plan: str = Field(description="Plan: @file.json (relative to the project) or inline JSON.")
    judge: str | None = Field(default=None, description="Judge profile, given like the actor.")
    idempotency_key: str | None = Field(
        default=None, description="Launching again with the same key returns the same run."
    )


@dg.op(out=dg.Out(str, description="The accepted run's id."))
def accepted_run(
    context: dg.OpExecutionContext, config: ExperimentConfig, control: ControlDatabase
) -> dg.Output[str]:
    project = settings()
    submission = Submission(
        dataset=config.dataset, actor=config.actor, plan=config.plan, judge=config.judge
    )
    try:
        run, created = submit_run(
            control.engine(),
            submission,
            project.owner,
            config.idempotency_key,
            base_dir=project.project_root,
            models=served_models(project),
        )
    except (SubmissionError, DatasetError, IdempotencyConflictError, ModelNotServedError) as error:
        raise dg.Failure(description=str(error), allow_retries=False) from None
    context.instance.add_run_tags(context.run_id, {"synth/run": run.run_id})
    context.log.info(f"{'accepted' if created else 'already accepted'} run {run.run_id}")
    return dg.Output(
        run.run_id,
        metadata={
            "run": run.run_id,
            "created": created,
            "status": run.status,
            "kind": run.kind,
            "dataset": run.spec.dataset.ref,
            "actor": f"{run.spec.actor.name}@{run.spec.actor.version}",
            "actor_digest": run.spec.actor.digest,
            "request_digest": run.request_digest,
            "idempotency_key": run.idempotency_key,
            "batches": run.batch_count,
        },
    )


@dg.job(
    description="Accept an experiment (dataset version, actor, optional judge, plan) exactly "
    "as `synth run start` does; the batch gate then runs its batches."
)
def launch_experiment() -> None:
    accepted_run()
