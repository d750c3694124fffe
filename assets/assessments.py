"""`assessments[batch]`: each attempt's reward from the task verifier (or a judge)."""

import hashlib

import dagster as dg
import pyarrow as pa

from assets.partitions import batches
from resources.control_database import ControlDatabase
from synth_pipelines.contracts.assessment import Assessment
from synth_pipelines.contracts.run_spec import parse_batch_key
from synth_pipelines.contracts.trial import TrialOutcome
from synth_pipelines.control.runs import get_run
from synth_pipelines.runtime.lifecycle import complete_batch
from synth_pipelines.runtime.results import summarize
from synth_pipelines.runtime.verifier_assessments import verifier_assessment


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
    context: dg.AssetExecutionContext, trials: pa.Table, control: ControlDatabase
) -> dg.Output[pa.Table]:
    engine = control.engine()
    run_id, index = parse_batch_key(context.partition_key)
    spec = get_run(engine, run_id).spec
    rows = [verifier_assessment(outcome) for outcome in TrialOutcome.from_table(trials)]
    summary = summarize(rows)
    if spec.kind == "eval":
        complete_batch(engine, spec, index, summary.as_dict())
    return dg.Output(
        Assessment.to_table(rows),
        metadata={
            "attempts": summary.attempts,
            "assessed": summary.assessed,
            "invalid": summary.invalid,
            "pass_rate": dg.MetadataValue.float(summary.pass_rate or 0.0),
            "mean_reward": dg.MetadataValue.float(summary.mean_reward or 0.0),
        },
        data_version=dg.DataVersion(assessment_version(rows)),
    )
