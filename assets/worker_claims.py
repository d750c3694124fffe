"""What a launched batch run does first: claim its batch as this run worker."""

import dagster as dg
from sqlalchemy import Engine

from synth_pipelines.config import Settings
from synth_pipelines.contracts.run_spec import RunSpec, batch_key
from synth_pipelines.control.worker_attempts import ClaimRefusedError, claim_batch
from synth_pipelines.control.worker_claim import WorkerClaim
from synth_pipelines.runtime.worker_lease import advertisement


def claimed(
    context: dg.AssetExecutionContext,
    engine: Engine,
    deployment: Settings,
    spec: RunSpec,
    index: int,
) -> WorkerClaim | None:
    """The claim of batch `index` by this run worker, or None (logged) when the batch
    cannot be claimed: already held, cancelled, completed, or its prerequisites not yet
    durable. A run that gets None ends without touching the batch."""
    worker = advertisement(deployment, f"dagster-run {context.run_id}")
    try:
        attempt = claim_batch(engine, spec, index, worker, lease_sec=deployment.worker_lease_sec)
    except ClaimRefusedError as refused:
        context.log.warning(f"{refused}: this run ends without touching the batch")
        return None
    context.log.info(
        f"claimed {batch_key(spec.run_id, index)} as worker attempt "
        f"{attempt.worker_attempt_id} (lease {deployment.worker_lease_sec:.0f} s)"
    )
    return WorkerClaim(engine, attempt, deployment.worker_lease_sec)
