"""`assessments[batch]`: each attempt's reward from the task verifier or a judge.

Normally the verdict comes from the verifier that ran inside the actor's trial. Run as a
backfill with a regrade config, the asset instead has the judge (or the task's verifier)
assess the retained work again; the actor never runs. The data version names who
assessed which work, since Dagster's automatic data versions ignore config.
"""

import asyncio
import hashlib

import dagster as dg
import pyarrow as pa

from assets.partitions import batches
from resources.control_database import ControlDatabase
from resources.object_store import ObjectStoreResource
from synth_pipelines.config import settings
from synth_pipelines.contracts.assessment import Assessment
from synth_pipelines.contracts.profile import PinnedProfile
from synth_pipelines.contracts.run_spec import parse_batch_key
from synth_pipelines.contracts.trial import TrialOutcome
from synth_pipelines.control.events import record_event
from synth_pipelines.control.runs import get_run
from synth_pipelines.judging.regrade import RegradeRefusedError, regrade_batch
from synth_pipelines.runtime.assessing import Assessor, trial_assessment
from synth_pipelines.runtime.lifecycle import complete_batch
from synth_pipelines.runtime.results import summarize


class AssessmentsConfig(dg.Config):
    """Set only for a regrade: its id, and the judge as pinned bytes (empty: the task's
    own verifier assesses the retained work again)."""

    regrade_id: str = ""
    judge: str = ""


def assessment_version(rows: list[Assessment]) -> str:
    """Names who assessed which work, so a regrade with another judge is a new version."""
    digest = hashlib.sha256()
    for row in sorted(rows, key=lambda r: r.assessment_id):
        digest.update(
            f"{row.attempt_id}\0{row.assessor_digest}\0{row.artifacts_digest}\0{row.reward}\n".encode()
        )
    return digest.hexdigest()


@dg.asset(
    partitions_def=batches, io_manager_key="table_io", group_name="batches", kinds={"parquet"}
)
def assessments(
    context: dg.AssetExecutionContext,
    config: AssessmentsConfig,
    trials: pa.Table,
    control: ControlDatabase,
    objects: ObjectStoreResource,
) -> dg.Output[pa.Table]:
    engine = control.engine()
    run_id, index = parse_batch_key(context.partition_key)
    spec = get_run(engine, run_id).spec
    outcomes = TrialOutcome.from_table(trials)
    if config.regrade_id:
        judge = PinnedProfile.model_validate_json(config.judge) if config.judge else None
        try:
            rows = asyncio.run(
                regrade_batch(
                    engine,
                    objects.store(),
                    spec,
                    index,
                    outcomes,
                    judge,
                    config.regrade_id,
                    settings().work_dir,
                )
            )
        except RegradeRefusedError as error:
            raise dg.Failure(description=str(error)) from None
        record_event(
            engine,
            run_id,
            "regrade.batch_assessed",
            {
                "regrade_id": config.regrade_id,
                "batch": context.partition_key,
                **summarize(rows).as_dict(),
            },
        )
    else:
        assessor = Assessor.of(spec.judge)
        rows = [trial_assessment(outcome, assessor) for outcome in outcomes]
        if spec.kind == "eval":
            complete_batch(engine, spec, index, summarize(rows).as_dict())
    summary = summarize(rows)
    return dg.Output(
        Assessment.to_table(rows),
        metadata={
            "assessor": rows[0].assessor if rows else "",
            "regrade": config.regrade_id,
            "attempts": summary.attempts,
            "assessed": summary.assessed,
            "invalid": summary.invalid,
            "pass_rate": dg.MetadataValue.float(summary.pass_rate or 0.0),
            "mean_reward": dg.MetadataValue.float(summary.mean_reward or 0.0),
        },
        data_version=dg.DataVersion(assessment_version(rows)),
    )
