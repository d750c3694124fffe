"""`launch_experiment`: submit an experiment from the Dagster Launchpad or GraphQL.

The job takes what `synth run start` takes and goes through the same submission path,
so the validation, the idempotency key and the run it names are the same; the batch
gate then admits the accepted run like any other.
"""

import dagster as dg
from pydantic import Field

from assets.run_tags import run_tags
from resources.control_database import ControlDatabase
from synth_pipelines.config import Settings
from synth_pipelines.contracts.dagster_tags import OWNER_TAG
from synth_pipelines.contracts.operator_key import LOCAL_ORG
from synth_pipelines.control.runs import IdempotencyConflictError
from synth_pipelines.registry.datasets import DatasetError
from synth_pipelines.runtime.served_models import ModelNotServedError, served_models
from synth_pipelines.submission.errors import SubmissionError
from synth_pipelines.submission.run_requests import Submission, submit_run


class ExperimentConfig(dg.Config):
    """The Launchpad's scaffold is these defaults: the README's example evaluation of the
    sample dataset by the oracle, which runs as it stands once the dataset is published."""

    dataset: str = Field(
        default="synth/sample@v1", description="Dataset version, org/name@version."
    )
    actor: str = Field(
        default="@profiles/oracle.json",
        description="Actor profile: @file.json (relative to the project), inline JSON, "
        "or a published org/name@version.",
    )
    plan: str = Field(
        default="@plans/eval.json",
        description="Plan: @file.json (relative to the project) or inline JSON.",
    )
    model: str | None = Field(
        default=None,
        description="Checkpoint to evaluate or train from (a tinker:// sampler path, as "
        "`synth checkpoint list` prints it); unset: the actor's own model.",
    )
    judge: str | None = Field(default=None, description="Judge profile, given like the actor.")
    idempotency_key: str | None = Field(
        default=None,
        description="Launching again with the same key returns the same run.",
    )


@dg.op(out=dg.Out(str, description="The accepted run's id."))
def accepted_run(
    context: dg.OpExecutionContext,
    config: ExperimentConfig,
    control: ControlDatabase,
    deployment: dg.ResourceParam[Settings],
) -> dg.Output[str]:
    empty = [name for name, value in config.model_dump().items() if value == ""]
    if empty:
        raise dg.Failure(
            description=f"empty {', '.join(empty)} in the launch config: give a value, or "
            "leave out the optional fields (model, judge, idempotency_key)",
            allow_retries=False,
        )
    submission = Submission(
        dataset=config.dataset,
        actor=config.actor,
        plan=config.plan,
        judge=config.judge,
        model=config.model,
    )
    # Launched through the gateway, the run is the launching key's owner's (the gateway
    # sets the tag, whatever the client sent); by the platform itself, the deployment's.
    owner = context.run.tags.get(OWNER_TAG, deployment.owner)
    try:
        run, created = submit_run(
            control.engine(),
            submission,
            owner,
            config.idempotency_key,
            base_dir=deployment.project_root,
            org=LOCAL_ORG,
            models=served_models(deployment, owner),
        )
    except (SubmissionError, DatasetError, IdempotencyConflictError, ModelNotServedError) as error:
        raise dg.Failure(description=str(error), allow_retries=False) from None
    context.instance.add_run_tags(context.run_id, run_tags(run))
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
            "model": run.spec.actor_model or "",
            "request_digest": run.request_digest,
            "idempotency_key": run.idempotency_key,
            "batches": run.batch_count,
        },
    )


@dg.job(
    description="Accept an experiment (dataset version, actor, plan, optional checkpoint "
    "and judge) exactly as `synth run start` does; the batch gate then runs its batches."
)
def launch_experiment() -> None:
    accepted_run()
